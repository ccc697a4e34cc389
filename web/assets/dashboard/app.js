// keepstate dashboard: polls api/stats every 2 s (counters, readiness and
// the partitions held here with their roles), shows the top movies
// (GET movies?minAvg=..&limit=20), looks movies up by id (also on load
// with /?movie=<id>), lists the jobs' tables (GET tables) and runs a query
// on one of them (GET tables/<name>?index=..; on load the first table's
// first index in descending order, which every table answers (the movie
// table answers only that order), or
// /?table=<name>&index=..&min=..&max=..&order=..&limit=..).
// URLs are relative so the page works behind a path-prefix proxy. Data is
// only ever written with textContent.
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
    showRoles(body.partitions || {});
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

// showRoles lists the partitions held here (api/stats "partitions", by
// table): each one's role (active, standby, warmup), an active's state, a
// copy's lag and the records replayed into it and their rate.
function showRoles(byTable) {
  const rows = [];
  for (const table of Object.keys(byTable).sort()) {
    for (const r of byTable[table]) {
      const tr = document.createElement("tr");
      const num = (v) => { const td = cell(v); td.className = "num"; return td; };
      tr.append(cell(table), num(String(r.partition)), cell(r.role), cell(r.state || ""),
        num(r.role === "active" ? "" : intFmt.format(r.lagRecords)),
        num(r.lagMs < 0 || r.role === "active" ? "" : intFmt.format(r.lagMs)),
        num(intFmt.format(r.replayed)), num(intFmt.format(Math.round(r.replayPerSec))));
      rows.push(tr);
    }
  }
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell("no partition held here yet");
    td.colSpan = 8;
    td.className = "muted";
    tr.append(td);
    rows.push(tr);
  }
  $("roles-body").replaceChildren(...rows);
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

// The tables of GET tables, for the query form.
let tables = [];

function option(value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text || value;
  return o;
}

function mutedRow(text, span) {
  const tr = document.createElement("tr");
  const td = cell(text);
  td.colSpan = span;
  td.className = "muted";
  tr.append(td);
  return tr;
}

function indexLabel(ix) { return ix.name + " (" + ix.kind + ")"; }

async function loadTables() {
  try {
    const [status, body] = await getJSON("tables");
    if (status !== 200) throw new Error(body.error || "HTTP " + status);
    tables = body.tables;
    const rows = tables.map((tb) => {
      const tr = document.createElement("tr");
      tr.append(cell(tb.name), cell(tb.key), cell(tb.indexes.map(indexLabel).join(", ") || "none"));
      return tr;
    });
    if (rows.length === 0) rows.push(mutedRow("No tables are configured.", 3));
    $("tables-body").replaceChildren(...rows);
    $("q-table").replaceChildren(...tables.map((tb) => option(tb.name)));
    $("query-form").hidden = tables.length === 0;
    fillIndexes();
    showError($("tables-error"), "");
  } catch (e) {
    showError($("tables-error"), "Cannot list tables: " + e.message);
  }
}

function currentTable() { return tables.find((tb) => tb.name === $("q-table").value); }

function fillIndexes() {
  const tb = currentTable();
  $("q-index").replaceChildren(...(tb ? tb.indexes.map((ix) => option(ix.name, indexLabel(ix))) : []));
}

async function runQuery(ev) {
  if (ev) ev.preventDefault();
  const tb = currentTable();
  const note = $("query-note");
  if (!tb || tb.indexes.length === 0) {
    showError($("query-error"), tb ? "Table " + tb.name + " declares no index to query." : "");
    return;
  }
  const params = new URLSearchParams({ index: $("q-index").value, order: $("q-order").value });
  for (const name of ["min", "max", "limit"]) {
    const v = $("q-" + name).value.trim();
    if (v !== "") params.set(name, v);
  }
  try {
    const [status, body] = await getJSON("tables/" + encodeURIComponent(tb.name) + "?" + params);
    if (status !== 200) throw new Error(body.error || "HTTP " + status);
    const head = ["#", "Key", ...tb.indexes.map((ix) => ix.name), "Value"].map((text) => {
      const th = document.createElement("th");
      th.textContent = text;
      return th;
    });
    $("query-head").replaceChildren(...head);
    const rows = body.items.map((item, i) => {
      const tr = document.createElement("tr");
      tr.append(cell(i + 1), cell(item.key));
      for (const ix of tb.indexes) {
        const td = cell(String(item.index[ix.name]));
        if (ix.kind === "number") td.className = "num";
        tr.append(td);
      }
      const value = cell(JSON.stringify(item.value));
      value.className = "json";
      tr.append(value);
      return tr;
    });
    if (rows.length === 0) rows.push(mutedRow("No document matches.", tb.indexes.length + 3));
    $("query-body").replaceChildren(...rows);
    $("query").hidden = false;
    const notes = [];
    if (body.next) notes.push("More documents follow: showing the first " + body.items.length + ".");
    if (body.partial) notes.push("Partial answer: partitions " + body.missingPartitions.join(", ") + " did not answer.");
    note.textContent = notes.join(" ");
    note.hidden = notes.length === 0;
    showError($("query-error"), "");
  } catch (e) {
    note.hidden = true;
    showError($("query-error"), "Query failed: " + e.message);
  }
}

// startTables lists the tables, then runs the query of the deep link
// (?table=..) or of the first table's first index.
async function startTables() {
  await loadTables();
  const q = new URLSearchParams(window.location.search);
  const name = q.get("table");
  if (name !== null && tables.some((tb) => tb.name === name)) {
    $("q-table").value = name;
    fillIndexes();
    for (const field of ["index", "min", "max", "order", "limit"]) {
      const v = q.get(field);
      if (v !== null) $("q-" + field).value = v;
    }
  }
  if (currentTable()) runQuery();
}

function tick() {
  refreshStats();
  refreshTop();
}

document.addEventListener("DOMContentLoaded", () => {
  $("top-form").addEventListener("submit", (ev) => { ev.preventDefault(); refreshTop(); });
  $("lookup-form").addEventListener("submit", lookup);
  $("query-form").addEventListener("submit", runQuery);
  $("q-table").addEventListener("change", fillIndexes);
  // Deep link: /?movie=362 looks the movie up on load.
  const movie = new URLSearchParams(window.location.search).get("movie");
  if (movie) {
    $("movieId").value = movie;
    $("lookup-form").requestSubmit();
  }
  tick();
  setInterval(tick, REFRESH_MS);
  startTables();
});
