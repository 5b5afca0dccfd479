// The dlock dashboard. Everything a backend says (names, hosts, notes) is
// put into the page as text (textContent), never parsed as HTML.
"use strict";

const key = document.querySelector('meta[name="dlock-key"]').content;
const allowBreak = document.querySelector('meta[name="dlock-allow-break"]').content === "yes";

let locks = [];       // the last "locks" message's locks
let timeline = [];    // every event so far
let offset = 0;       // server clock minus this one, from the last message
let received = 0;     // when the last "locks" message arrived (this clock)
let selected = null;  // the lock whose timeline is shown, or null for all

const $ = (sel) => document.querySelector(sel);
const prefixInput = $("#prefix");

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function duration(ms) {
  if (ms < 0) ms = 0;
  if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function holderText(h) {
  if (!h) return "-";
  const parts = [];
  if (h.host) parts.push(h.host);
  if (h.pid) parts.push("pid " + h.pid);
  return parts.length ? parts.join(" ") : "-";
}

function shown(name) {
  return name.startsWith(prefixInput.value);
}

function heldFor(l) {
  if (!l.holder || !l.holder.acquired_at) return "-";
  return duration(Date.now() + offset - Date.parse(l.holder.acquired_at));
}

function expiresIn(l) {
  if (l.expires_in_seconds === null) return "-";
  return duration(l.expires_in_seconds * 1000 - (Date.now() - received));
}

function renderLocks() {
  const body = $("#locks tbody");
  const rows = [];
  for (const l of locks) {
    if (!shown(l.name)) continue;
    const tr = document.createElement("tr");
    tr.dataset.name = l.name;
    if (l.name === selected) tr.className = "selected";
    tr.append(el("td", l.name, "name"));
    const holder = el("td", holderText(l.holder), "holder");
    if (l.holder && l.holder.note) {
      holder.append(" ", el("span", l.holder.note, "note"));
    }
    if (l.permits.length > 0) {
      // A semaphore's permit holders, or a read-write lock's readers.
      holder.replaceChildren(l.limit !== null
        ? l.permits.length + " of " + l.limit + " permits"
        : l.permits.length + (l.permits.length === 1 ? " reader" : " readers"));
      for (const p of l.permits) {
        let t = holderText(p.holder) + " (token " + p.token + ")";
        if (p.holder.note) t += " " + p.holder.note;
        holder.append(el("span", t, "permit"));
      }
    }
    tr.append(holder);
    tr.append(el("td", l.held ? l.token : "-", "token"));
    tr.append(el("td", heldFor(l), "held-for"));
    tr.append(el("td", expiresIn(l), "expires-in"));
    const waiters = el("td", l.waiters.length, "waiters");
    for (const w of l.waiters) {
      let t = holderText(w);
      if (w.note) t += " " + w.note;
      waiters.append(el("span", t, "waiter"));
    }
    tr.append(waiters);
    const action = el("td");
    if (allowBreak && l.held) {
      const b = el("button", "Break", "break");
      b.type = "button";
      b.addEventListener("click", (ev) => { ev.stopPropagation(); breakLock(l); });
      action.append(b);
    }
    tr.append(action);
    tr.addEventListener("click", () => select(l.name));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  $("#empty").hidden = rows.length > 0;
  $("#count").textContent = rows.length + " of " + locks.length + " locks";
}

// tick refreshes the time columns between messages.
function tick() {
  for (const tr of document.querySelectorAll("#locks tbody tr")) {
    const l = locks.find((x) => x.name === tr.dataset.name);
    if (!l) continue;
    tr.querySelector(".held-for").textContent = heldFor(l);
    tr.querySelector(".expires-in").textContent = expiresIn(l);
  }
}

function renderTimeline() {
  const body = $("#timeline tbody");
  const rows = [];
  for (let i = timeline.length - 1; i >= 0 && rows.length < 500; i--) {
    const e = timeline[i];
    if (selected !== null ? e.name !== selected : !shown(e.name)) continue;
    const tr = document.createElement("tr");
    tr.dataset.kind = e.kind;
    tr.append(el("td", new Date(e.at).toLocaleTimeString(undefined, { hour12: false }) + "." + String(e.at % 1000).padStart(3, "0")));
    tr.append(el("td", e.name, "name"));
    tr.append(el("td", e.kind, "kind " + e.kind));
    tr.append(el("td", e.token, "token"));
    tr.append(el("td", e.holder));
    tr.append(el("td", e.detail));
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  $("#timeline-of").textContent = selected === null ? "" : "of " + selected;
  $("#all").hidden = selected === null;
}

function select(name) {
  selected = name;
  renderLocks();
  renderTimeline();
}

function setStatus(text, bad) {
  const s = $("#status");
  s.textContent = text;
  s.className = bad ? "bad" : "";
}

async function breakLock(l) {
  const who = holderText(l.holder) + (l.holder && l.holder.note ? " " + l.holder.note : "");
  if (!confirm("Break " + l.name + ", held by " + who + " with token " + l.token + "?\n\nIt is broken only if that grant still holds it; the next holder gets a higher token.")) {
    return;
  }
  try {
    const r = await fetch("break", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Dlock-Key": key },
      body: JSON.stringify({ name: l.name, token: l.token }),
    });
    const v = await r.json();
    setStatus(r.ok ? v.broke : v.error, !r.ok);
  } catch (err) {
    setStatus("break failed: " + err, true);
  }
}

function onLocks(m) {
  locks = m.locks;
  offset = m.at - Date.now();
  received = Date.now();
  const e = $("#error");
  e.hidden = !m.error;
  e.textContent = m.error || "";
  renderLocks();
}

function connect() {
  const es = new EventSource("events");
  const conn = $("#conn");
  es.addEventListener("open", () => { conn.textContent = "live"; conn.className = "conn live"; });
  es.addEventListener("error", () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; });
  es.addEventListener("state", (ev) => {
    const m = JSON.parse(ev.data);
    timeline = m.timeline;
    onLocks(m.locks);
    renderTimeline();
  });
  es.addEventListener("locks", (ev) => onLocks(JSON.parse(ev.data)));
  es.addEventListener("timeline", (ev) => {
    timeline.push(...JSON.parse(ev.data));
    if (timeline.length > 5000) timeline = timeline.slice(-5000);
    renderTimeline();
  });
}

prefixInput.addEventListener("input", () => {
  if (selected !== null && !shown(selected)) selected = null;
  renderLocks();
  renderTimeline();
});
$("#all").addEventListener("click", () => select(null));
setInterval(tick, 250);
connect();
