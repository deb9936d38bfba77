"""The /play page in headless Chromium (Debian's chromium + chromedriver, driven by Selenium): one
FunctionGym episode played through by typed actions (the privileged solver's, so the final reward is
the gym's correct-answer reward 1.0), one agent turn by the served model, and a screenshot under
test-artifacts/."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import requests

from userrl.envs import load_tasks, make_solver
from userrl.envs.registry import GYMS

pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def play_server(serve_port, tiny_model):
    """The app serving the tiny model with the playground, on a free loopback port."""
    from ray import serve

    from userrl.serving.app import build_app
    from userrl.serving.config import ServeConfig

    port = serve_port
    config = ServeConfig(model=tiny_model, model_name="tiny-random", max_model_len=1024, num_threads=1,
                         num_cpus_per_replica=0.5, port=port, play={"max_turns": 8, "max_new_tokens": 24})
    serve.run(build_app(config), name="userrl-play-test", route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.delete("userrl-play-test")


@pytest.fixture(scope="module")
def browser():
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1750"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 180):  # bounds a hang (make test runs two test processes)
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition(d))


def _text(driver, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def _start(driver, gym: str, task_id: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, "gym")).select_by_value(gym)
    Select(driver.find_element(By.ID, "split")).select_by_value("test")
    box = driver.find_element(By.ID, "task-id")
    box.clear()
    box.send_keys(task_id)
    driver.find_element(By.ID, "start").click()
    _wait(driver, lambda d: task_id in _text(d, "#task-label") and "Waiting" in _text(d, "#status"))


def test_play_page_episode_typed_then_agent(play_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    assert requests.get(f"{play_server}/play/static/nothing.py", timeout=30).status_code == 404
    browser.get(f"{play_server}/play")
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "gym")).options) == len(GYMS))  # every gym
    assert "tiny-random" in _text(browser, "#model-info")

    # A person plays FunctionGym through with the privileged solver's actions.
    task = load_tasks("function", split="test")[0]
    _start(browser, "function", task.item_key)
    solver = make_solver("function", task, np.random.default_rng(0))
    feedback = None
    for turn in range(1, 9):
        choice, content = solver.next_action(feedback)
        Select(browser.find_element(By.ID, "choice")).select_by_value(choice)
        browser.find_element(By.ID, "content").send_keys(content)
        browser.find_element(By.ID, "send").click()
        _wait(browser, lambda d, n=turn: len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == n)
        feedback = browser.find_elements(By.CSS_SELECTOR, ".msg.user pre")[-1].text
        if "Episode over" in _text(browser, "#status"):
            break
    status = _text(browser, "#status")
    assert "Episode over (env_done)" in status and "Final reward: 1" in status
    assert _text(browser, "#total-reward") == "1"
    person_turns = browser.find_elements(By.CSS_SELECTOR, ".msg.person")
    assert len(person_turns) == turn >= 2
    assert "action: [search] test" in " ".join(t.text for t in person_turns)
    assert "Test case:" in " ".join(t.text for t in browser.find_elements(By.CSS_SELECTOR, ".msg.user"))
    assert browser.find_elements(By.CSS_SELECTOR, ".msg.user .reward.pos")  # the correct answer's reward
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "play_function_typed.png"))

    # The served model takes a turn of a new episode.
    other = load_tasks("function", split="test")[1]
    _start(browser, "function", other.item_key)
    browser.find_element(By.ID, "agent-turn").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.agent"))
    agent = browser.find_elements(By.CSS_SELECTOR, ".msg.agent")
    assert len(agent) == 1 and "agent (model) · turn 1" in agent[0].text.lower()
    _wait(browser, lambda d: "1 / 8" in _text(d, "#turn-count"))
    browser.save_screenshot(str(ARTIFACTS / "play_function_agent.png"))
