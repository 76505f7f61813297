// The distlock console page: reads the console's JSON API (under the same path as this
// script) and renders it. Every value from the server is inserted as text, never as markup.
"use strict";

const base = document.currentScript
  ? document.currentScript.src.replace(/\/console\.js(\?.*)?$/, "")
  : "";
let mutations = false;

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const token = sessionStorage.getItem("distlock-console-token");
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

async function call(method, path) {
  const init = { method, credentials: "same-origin", headers: headers() };
  if (method === "POST") init.headers["X-Distlock-Console"] = "1";
  const response = await fetch(base + path, init);
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!response.ok) {
    const why = body && (body.detail || body.title) ? body.detail || body.title : text;
    throw new Error(method + " " + path + ": " + response.status + " " + why);
  }
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function showError(err) {
  document.getElementById("error").textContent = err ? String(err.message || err) : "";
}

function seconds(ms) {
  return ms === null || ms === undefined ? "" : (ms / 1000).toFixed(1) + " s";
}

async function overview() {
  const o = await call("GET", "/api/overview");
  mutations = o.mutations;
  const h = o.health;
  document.getElementById("store").textContent =
    h.store + (h.ready ? " · ready" : " · NOT READY") + " · prefix " + o.prefix +
    " · this client " + o.identity + (mutations ? "" : " · read-only");
  const nodes = document.getElementById("nodes");
  nodes.replaceChildren();
  if (h.nodes.length === 0) nodes.append(el("li", "in memory: nothing to ask"));
  for (const n of h.nodes) {
    const li = el("li", n.node + ": ");
    li.append(n.up ? el("span", "up, " + n.latency_ms.toFixed(2) + " ms", "up")
                   : el("span", "down: " + n.error, "down"));
    nodes.append(li);
  }
  const select = document.getElementById("limiter");
  const chosen = select.value;
  select.replaceChildren();
  const list = document.getElementById("limiters");
  list.replaceChildren();
  for (const l of o.limiters) {
    const option = el("option", l.name);
    option.value = l.name;
    select.append(option);
    // A policy's text starts with its own name, which is often the limiter's: say it once.
    const policies = l.policies.map((p) => p.startsWith(l.name + ": ") ? p.slice(l.name.length + 2) : p);
    list.append(el("li", l.name + ": " + policies.join("; ") + " · breaker " + l.breaker +
      (l.shadow ? " · shadow" : "")));
  }
  if (chosen) select.value = chosen;
  document.getElementById("lookup").hidden = o.limiters.length === 0;
  if (o.limiters.length === 0) list.append(el("li", "No limiter is shown here.", "note"));
}

async function locks() {
  const listing = await call("GET", "/api/locks");
  const tbody = document.querySelector("#locks tbody");
  tbody.replaceChildren();
  for (const lock of listing.locks) {
    const tr = el("tr");
    tr.dataset.lock = lock.name;
    tr.append(el("td", lock.name, "name"));
    tr.append(el("td", lock.state === "reserved" ? "(reserved for a waiter)" : lock.holder || "?"));
    tr.append(el("td", lock.since_ms ? new Date(lock.since_ms).toLocaleString() : ""));
    tr.append(el("td", seconds(lock.remaining_ttl_ms)));
    tr.append(el("td", lock.waiters ? "yes" : "no"));
    const td = el("td");
    const button = el("button", "Force unlock", "danger");
    button.dataset.force = lock.name;
    button.disabled = !mutations || lock.state !== "held";
    button.title = mutations ? "Free this lock now; its holder is told" : "This console only reads";
    button.addEventListener("click", () => forceUnlock(lock.name, button));
    td.append(button);
    tr.append(td);
    tbody.append(tr);
  }
  document.getElementById("lock-count").textContent = "(" + listing.locks.length + ")";
  document.getElementById("no-locks").hidden = listing.locks.length !== 0;
  document.getElementById("lock-note").textContent = listing.complete
    ? "" : "More locks may exist: the listing stopped at its limit.";
  document.body.dataset.loaded = "true";
}

async function forceUnlock(name, button) {
  if (!window.confirm("Force lock " + JSON.stringify(name) + " free? Its holder loses it.")) return;
  button.disabled = true;
  try {
    const answer = await call("POST", "/api/locks/" + encodeURIComponent(name) + "/force-unlock");
    showError(answer.forced ? "" : "Nobody held " + name + " any more.");
    await locks();
  } catch (err) {
    showError(err);
    button.disabled = false;
  }
}

function renderDecision(d, limiterName) {
  const box = document.getElementById("decision");
  box.replaceChildren();
  const summary = el("p", d.subject + ": " + (d.allowed ? "would be allowed" : "would be refused") +
    ", " + d.remaining + " of " + d.limit + " left" +
    (d.locked_out ? ", LOCKED OUT" : "") +
    (d.allowed ? "" : ", retry after " + seconds(d.retry_after_ms)));
  box.append(summary);
  const table = el("table");
  const head = el("tr");
  for (const h of ["policy", "allowed", "remaining", "limit", "retry after", "full again in"]) head.append(el("th", h));
  table.append(head);
  for (const p of d.policies) {
    const tr = el("tr");
    for (const v of [p.policy, p.allowed ? "yes" : "no", p.remaining, p.limit,
      seconds(p.retry_after_ms), seconds(p.reset_after_ms)]) tr.append(el("td", v));
    table.append(tr);
  }
  box.append(table);
  const reset = el("button", "Reset this subject", "danger");
  reset.disabled = !mutations;
  reset.addEventListener("click", async () => {
    if (!window.confirm("Reset " + JSON.stringify(d.subject) + "?")) return;
    try {
      const after = await call("POST", "/api/rate-limits/" + encodeURIComponent(limiterName) + "/" +
        encodeURIComponent(d.subject) + "/reset");
      renderDecision(after, limiterName);
      showError("");
    } catch (err) { showError(err); }
  });
  box.append(reset);
}

async function refresh() {
  try {
    await overview();
    await locks();
    showError("");
  } catch (err) {
    showError(err);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const token = document.getElementById("token");
  token.value = sessionStorage.getItem("distlock-console-token") || "";
  token.addEventListener("change", () => {
    sessionStorage.setItem("distlock-console-token", token.value);
    refresh();
  });
  document.getElementById("lookup").addEventListener("submit", async (event) => {
    event.preventDefault();
    const limiterName = document.getElementById("limiter").value;
    const subject = document.getElementById("subject").value;
    try {
      const d = await call("GET", "/api/rate-limits/" + encodeURIComponent(limiterName) + "/" +
        encodeURIComponent(subject));
      renderDecision(d, limiterName);
      showError("");
    } catch (err) { showError(err); }
  });
  refresh();
  // Poll only while the page is seen: a tab left in the background costs the store nothing.
  setInterval(() => {
    if (document.visibilityState === "visible") locks().catch(showError);
  }, 2000);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refresh();
  });
});
