// keepstate dashboard: polls api/stats every 2 s, shows the top movies
// (GET movies?minAvg=..&limit=20) and looks movies up by id (also on load
// with /?movie=<id>). URLs are relative so the page works behind a
// path-prefix proxy. Data is only ever written with textContent.
"use strict";

const REFRESH_MS = 2000;
const TOP_LIMIT = 20;
const intFmt = new Intl.NumberFormat("en-US");

function $(id) { return document.getElementById(id); }

function showError(el, msg) {
  el.textContent = msg || "";
  el.hidden = !msg;
}

// getJSON fetches url and returns [status, body]; a network failure or a
// non-JSON body throws.
async function getJSON(url) {
  const resp = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await resp.json();
  return [resp.status, body];
}

function formatRating(r) { return Number(r).toFixed(2); }

async function refreshStats() {
  const badge = $("ready");
  try {
    const [status, body] = await getJSON("api/stats");
    if (status !== 200) throw new Error(body.error || "HTTP " + status);
    for (const el of document.querySelectorAll("[data-stat]")) {
      const v = body.stats[el.dataset.stat];
      el.textContent = v === undefined ? "–" : intFmt.format(v);
    }
    badge.className = "badge " + (body.ready ? "ready" : "notready");
    badge.textContent = body.ready ? "ready" : "not ready";
    badge.title = body.reason || "";
    if (!body.ready && body.reason) badge.textContent += ": " + body.reason;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    showError($("stats-error"), "");
  } catch (e) {
    badge.className = "badge unknown";
    badge.textContent = "unreachable";
    showError($("stats-error"), "Cannot read counters: " + e.message);
  }
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

async function refreshTop() {
  const tbody = $("top-body");
  const minAvg = $("minAvg").value.trim() || "0";
  try {
    const url = "movies?minAvg=" + encodeURIComponent(minAvg) + "&limit=" + TOP_LIMIT;
    const [status, body] = await getJSON(url);
    if (status !== 200) throw new Error(body.error || "HTTP " + status);
    const rows = body.movies.map((m, i) => {
      const tr = document.createElement("tr");
      tr.append(cell(i + 1), cell(String(m.movieId)), cell(formatRating(m.rating)), cell(intFmt.format(m.count)));
      return tr;
    });
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      const td = cell("No movie averages at least " + minAvg + " yet.");
      td.colSpan = 4;
      td.className = "muted";
      tr.append(td);
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    showError($("top-error"), "");
  } catch (e) {
    showError($("top-error"), "Cannot read top movies: " + e.message);
  }
}

async function lookup(ev) {
  ev.preventDefault();
  const id = $("movieId").value.trim();
  const result = $("lookup-result");
  try {
    const [status, body] = await getJSON("movies/" + encodeURIComponent(id));
    if (status !== 200) {
      result.hidden = true;
      showError($("lookup-error"), body.error || "HTTP " + status);
      return;
    }
    $("lookup-id").textContent = String(body.movieId);
    $("lookup-rating").textContent = formatRating(body.rating);
    $("lookup-count").textContent = intFmt.format(body.count);
    result.hidden = false;
    showError($("lookup-error"), "");
  } catch (e) {
    result.hidden = true;
    showError($("lookup-error"), "Lookup failed: " + e.message);
  }
}

function tick() {
  refreshStats();
  refreshTop();
}

document.addEventListener("DOMContentLoaded", () => {
  $("top-form").addEventListener("submit", (ev) => { ev.preventDefault(); refreshTop(); });
  $("lookup-form").addEventListener("submit", lookup);
  // Deep link: /?movie=362 looks the movie up on load.
  const movie = new URLSearchParams(window.location.search).get("movie");
  if (movie) {
    $("movieId").value = movie;
    $("lookup-form").requestSubmit();
  }
  tick();
  setInterval(tick, REFRESH_MS);
});
