// The /play page: plain JavaScript against /play/api (no build step, no external files).
"use strict";
const $ = (id) => document.getElementById(id);
let episode = null;
let busy = false;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function call(method, path, body) {
  const response = await fetch(path, { method, headers: headers(), body: body ? JSON.stringify(body) : undefined });
  const data = await response.json();
  if (!response.ok) throw new Error((data.error && data.error.message) || response.statusText);
  return data;
}

function element(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function message(cls, who, text, reward) {
  const box = element("div", "msg " + cls);
  if (reward !== undefined && reward !== null) {
    box.appendChild(element("span", "reward" + (reward > 0 ? " pos" : ""), "reward " + fmt(reward)));
  }
  box.appendChild(element("div", "who", who));
  box.appendChild(element("pre", "", text));
  return box;
}

function fmt(x) { return Number.isInteger(x) ? String(x) : x.toFixed(3); }

function render() {
  $("empty").hidden = !!episode;
  $("system-prompt").hidden = !episode;
  $("scoreboard").hidden = !episode;
  const transcript = $("transcript");
  transcript.innerHTML = "";
  if (!episode) return;
  const system = episode.prompt.find((m) => m.role === "system");
  $("system-text").textContent = system ? system.content : "";
  for (const m of episode.prompt.filter((m) => m.role !== "system")) {
    transcript.appendChild(message("task", "task (" + m.role + ")", m.content));
  }
  for (const turn of episode.turns) {
    const who = turn.by === "agent" ? "agent (model)" : "agent (you)";
    const box = message(turn.by === "agent" ? "agent turn" : "person turn", who + " · turn " + (turn.index + 1),
                        turn.text.trim() ? turn.text : "(blank: " + turn.text.length + " whitespace characters)");
    box.appendChild(element("div", "action", turn.action ? "action: " + turn.action : "no valid action"));
    transcript.appendChild(box);
    if (turn.feedback !== null) {
      transcript.appendChild(message("user", "simulated user / environment", turn.feedback, turn.reward));
    }
  }
  $("task-label").textContent = episode.gym + " / " + episode.task_id;
  $("turn-count").textContent = episode.turns.length + " / " + episode.max_turns;
  $("total-reward").textContent = fmt(episode.total_reward);
  const status = $("status");
  status.className = "status" + (episode.done ? " done" : "");
  status.textContent = episode.done
    ? "Episode over (" + episode.stop_reason + "). Final reward: " + fmt(episode.total_reward)
    : "Waiting for the agent's turn " + (episode.turns.length + 1);
  $("controls").hidden = episode.done;
  transcript.lastElementChild && transcript.lastElementChild.scrollIntoView({ block: "nearest" });
}

async function run(task) {
  if (busy) return;
  busy = true;
  document.querySelectorAll("button").forEach((b) => (b.disabled = true));
  $("error").hidden = true;
  try {
    await task();
  } catch (error) {
    $("error").textContent = error.message;
    $("error").hidden = false;
  } finally {
    busy = false;
    document.querySelectorAll("button").forEach((b) => (b.disabled = false));
    render();
  }
}

function step(body) {
  return run(async () => { episode = await call("POST", "/play/api/episodes/" + episode.id + "/step", body); });
}

$("start").onclick = () => run(async () => {
  episode = await call("POST", "/play/api/episodes", {
    gym: $("gym").value, split: $("split").value, task_id: $("task-id").value.trim() || null,
    seed: Number($("seed").value) || 0,
  });
});
$("agent-turn").onclick = () => step({ by: "agent" });
$("send").onclick = () => step({ by: "person", choice: $("choice").value, content: $("content").value })
  .then(() => { $("content").value = ""; });
$("content").addEventListener("keydown", (e) => { if (e.key === "Enter") $("send").click(); });
$("autoplay").onclick = () => run(async () => {
  while (episode && !episode.done) {
    episode = await call("POST", "/play/api/episodes/" + episode.id + "/step", { by: "agent" });
    render();
  }
});

(async () => {
  try {
    const info = await call("GET", "/play/api/gyms");
    $("model-info").textContent = "model " + info.model + " · protocol " + info.protocol;
    for (const g of info.gyms) $("gym").appendChild(new Option(g, g));
    for (const s of info.splits) $("split").appendChild(new Option(s, s));
    for (const c of info.choices) $("choice").appendChild(new Option(c, c));
  } catch (error) {
    $("model-info").textContent = "cannot reach the server: " + error.message;
  }
  render();
})();
