// Demo page over the JSON API (/models, /sentiment, /translate, /translate/file, /attention). No libraries, no
// build step.
"use strict";

const KEY_STORAGE = "transformer-demo.api-key";
const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]]; // light -> dark blue
const KINDS = {
  encoder: { field: "encoder_self_attention", layers: "layers", rows: "source_tokens", cols: "source_tokens", name: "encoder self-attention" },
  decoder: { field: "decoder_self_attention", layers: "decoder_layers", rows: "target_tokens", cols: "target_tokens", name: "decoder self-attention" },
  cross: { field: "cross_attention", layers: "decoder_layers", rows: "target_tokens", cols: "source_tokens", name: "cross-attention" },
};
const state = { models: [], att: null, kind: "encoder", layer: 0, head: "avg", hover: null, download: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") Object.assign(node.style, v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

// --- API ---------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The 4xx/5xx `detail`: a string, or a list of {loc, msg, type} (422). */
function detailText(body) {
  const d = body && body.detail;
  if (typeof d === "string") return d;
  if (!Array.isArray(d)) return "";
  return d.map((e) => {
    const field = (e.loc || []).filter((p) => p !== "body").join(".");
    const msg = e.msg || JSON.stringify(e);
    return field && !msg.startsWith(field) ? `${field}: ${msg}` : msg;
  }).join("\n");
}

/** fetch with the API key -> the Response; an ApiError (its `detail`) when unreachable or not 2xx. */
async function send(path, init) {
  const headers = { Accept: "application/json", ...init.headers };
  const key = $("api-key").value.trim();
  if (key) headers["X-API-Key"] = key;
  let res;
  try {
    res = await fetch(path, { ...init, headers });
  } catch (e) {
    throw new ApiError(0, `cannot reach the server (${e.message})`);
  }
  if (!res.ok) {
    const data = await res.json().catch(() => null);
    throw new ApiError(res.status, detailText(data) || res.statusText || "request failed");
  }
  return res;
}

async function api(method, path, body) {
  const init = { method };
  if (body !== undefined) Object.assign(init, { headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return (await send(path, init)).json().catch(() => null);
}

function showError(section, err) {
  const box = $(`${section}-error`);
  if (!err) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  const status = err.status ? `${err.status} · ` : "";
  const hint = err.status === 401 ? "\nEnter the API key at the top of the page." : "";
  box.textContent = `${status}${err.message}${hint}`;
  box.dataset.status = err.status || "";
  box.hidden = false;
  $("api-key").classList.toggle("invalid", err.status === 401);
}

/** Runs `work` with the section's button disabled; API errors land in the section's error line. */
async function run(section, work) {
  const button = $(`${section}-submit`);
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  showError(section, null);
  try {
    await work();
  } catch (err) {
    if (!(err instanceof ApiError)) console.error(err);
    showError(section, err instanceof ApiError ? err : new ApiError(0, String(err)));
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

// --- models and API key ------------------------------------------------------------------------------

function setStatus(text, kind) {
  const pill = $("status");
  pill.textContent = text;
  pill.className = `pill ${kind}`;
}

async function loadModels() {
  try {
    const ready = await fetch("/ready").then((r) => r.json()).catch(() => null);
    if (ready && ready.status !== "ready") {
      setStatus(`${ready.status}${ready.reason ? `: ${ready.reason}` : ""}`, "warn");
      if (ready.status !== "failed") setTimeout(loadModels, 1000);
      return;
    }
    state.models = (await api("GET", "/models")).models;
    showError("global", null);
    setStatus(`ready · ${state.models.length} models`, "ok");
    fillModelSelects();
    loadFileFormats();
  } catch (err) {
    setStatus(err.status === 401 ? "API key needed" : "error", "bad");
    showError("global", err);
  }
}

function fillModelSelects() {
  const sentiment = state.models.filter((m) => m.task === "sentiment");
  const translators = state.models.filter((m) => m.task === "translation");
  $("sentiment-model").replaceChildren(
    el("option", { value: "" }, "auto (by language)"),
    ...sentiment.map((m) => el("option", { value: m.name }, `${m.name} (${m.source_langs.join(", ")})`)),
  );
  // "auto" first (the default): the API detects each text's language and picks the model
  const pairs = new Map();
  for (const m of translators) for (const t of m.target_langs) pairs.set(`auto>${t}`, `detect language → ${t}`);
  for (const m of translators) {
    for (const s of m.source_langs) for (const t of m.target_langs) pairs.set(`${s}>${t}`, `${s} → ${t}`);
  }
  const chosen = $("translate-pair").value;
  $("translate-pair").replaceChildren(...[...pairs].map(([v, label]) => el("option", { value: v }, label)));
  if (pairs.has(chosen)) $("translate-pair").value = chosen;
  const current = $("attention-model").value;
  $("attention-model").replaceChildren(...state.models.map((m) => el("option", { value: m.name }, m.name)));
  if (current) $("attention-model").value = current;
  onAttentionModel();
}

function modelInfo(name) {
  return state.models.find((m) => m.name === name);
}

// --- sentiment ---------------------------------------------------------------------------------------

function renderSentiment(result, text) {
  const probs = Object.entries(result.probabilities);
  const box = $("sentiment-result");
  box.replaceChildren(
    el("div", { class: "verdict" },
      el("span", { class: `label label-${result.label}`, "data-testid": "sentiment-label" }, result.label),
      el("span", { class: "muted" }, `${(100 * result.score).toFixed(1)}% · ${result.model}`)),
    el("ul", { class: "probs" }, ...probs.map(([label, p]) =>
      el("li", { "data-testid": "sentiment-prob", dataset: { label, probability: p } },
        el("span", { class: "name" }, label),
        el("span", { class: "bar" }, el("span", { class: `fill label-${label}`, style: { width: `${100 * p}%` } })),
        el("span", { class: "pct" }, `${(100 * p).toFixed(1)}%`)))),
    el("button", { type: "button", class: "link", id: "sentiment-attention",
      onclick: () => showAttentionFor(result.model, text) }, "Show its attention ↓"),
  );
  box.hidden = false;
}

function submitSentiment(ev) {
  ev.preventDefault();
  const text = $("sentiment-text").value;
  const body = { text };
  if ($("sentiment-model").value) body.model = $("sentiment-model").value;
  return run("sentiment", async () => renderSentiment((await api("POST", "/sentiment", body)).results[0], text));
}

// --- translation -------------------------------------------------------------------------------------

function onDecoding() {
  const greedy = $("decoding-greedy").checked;
  $("beam-size").disabled = greedy;
  $("num-hypotheses").disabled = greedy;
}

function submitTranslate(ev) {
  ev.preventDefault();
  const [source, target] = ($("translate-pair").value || ">").split(">");
  const greedy = $("decoding-greedy").checked;
  const text = $("translate-text").value;
  const body = {
    text, source_lang: source, target_lang: target, return_scores: true,
    beam_size: greedy ? 1 : Number($("beam-size").value), num_hypotheses: greedy ? 1 : Number($("num-hypotheses").value),
  };
  return run("translate", async () => {
    const res = await api("POST", "/translate", body);
    const r = res.results[0];
    const model = r.model || res.model;  // per text with "auto": the model that answered, or "passthrough"
    const hyps = r.hypotheses || [{ translation: r.translation, score: r.score }];
    const found = r.detected_language;
    $("translate-result").replaceChildren(
      el("p", { class: "answered" },
        found ? el("span", { "data-testid": "translate-detected", dataset: { language: found.language } },
          `detected ${found.language} (${(100 * found.confidence).toFixed(0)}%) · `) : "",
        el("span", { "data-testid": "translate-model", dataset: { model } },
          model === "passthrough" ? `passed through unchanged (nothing to translate into ${target})` : `answered by ${model}`)),
      el("p", { class: "muted small" }, `${model} · ${greedy ? "greedy" : `beam ${body.beam_size}`} · score = length-normalised log-probability`),
      el("ol", { class: "hyps", id: "translate-hypotheses" }, ...hyps.map((h) =>
        el("li", { "data-testid": "hypothesis" },
          el("span", { class: "hyp-text" }, h.translation),
          el("span", { class: "score", "data-testid": "hypothesis-score" }, h.score == null ? "" : h.score.toFixed(3)),
          model === "passthrough" ? "" : el("button", { type: "button", class: "link", title: "attention for this hypothesis",
            onclick: () => showAttentionFor(model, text, h.translation, target) }, "attention")))),
    );
    $("translate-result").hidden = false;
  });
}

// --- file translation --------------------------------------------------------------------------------

/** The formats POST /translate/file takes (the LibreTranslate API's settings); the page's list if not served. */
async function loadFileFormats() {
  const settings = await api("GET", "/libretranslate/frontend/settings").catch(() => null);
  const formats = settings && settings.supportedFilesFormat;
  if (!Array.isArray(formats) || !formats.length) return;
  $("translate-file").accept = formats.join(",");
  $("translate-formats").textContent = formats.join(", ");
}

/** The download's name from Content-Disposition: its UTF-8 filename*, else its filename. */
function attachmentName(header, fallback) {
  const utf8 = /filename\*=UTF-8''([^;]+)/i.exec(header || "");
  if (utf8) return decodeURIComponent(utf8[1]);
  const plain = /filename="([^"]*)"/i.exec(header || "");
  return plain ? plain[1] : fallback;
}

function translateFile(file) {
  if (!file) return undefined;
  const [source, target] = ($("translate-pair").value || ">").split(">");
  const form = new FormData();
  form.append("file", file);
  form.append("source_lang", source);
  form.append("target_lang", target);
  const picker = $("translate-file-button");
  picker.disabled = true; // one file at a time (run() disables the section's submit button)
  return run("translate", async () => {
    const res = await send("/translate/file", { method: "POST", headers: { Accept: "*/*" }, body: form });
    const blob = await res.blob();
    const name = attachmentName(res.headers.get("Content-Disposition"), file.name);
    if (state.download) URL.revokeObjectURL(state.download);
    state.download = URL.createObjectURL(blob);
    $("translate-result").replaceChildren(
      el("p", { class: "answered" }, `${file.name} translated ${source === "auto" ? "from the detected language" : `from ${source}`} into ${target}: `,
        el("a", { href: state.download, download: name, "data-testid": "translate-download" }, name),
        el("span", { class: "muted small" }, ` (${(blob.size / 1024).toFixed(1)} KB)`)),
    );
    $("translate-result").hidden = false;
  }).finally(() => { picker.disabled = false; });
}

/** Dropping a file on `zone` translates it; the zone is marked while a file is dragged over it. */
function acceptDrops(zone) {
  const mark = (on) => zone.classList.toggle("dragging", on);
  zone.addEventListener("dragover", (ev) => {
    if (!ev.dataTransfer || !ev.dataTransfer.types.includes("Files")) return; // dragged text drops as text
    ev.preventDefault();
    ev.dataTransfer.dropEffect = "copy";
    mark(true);
  });
  zone.addEventListener("dragleave", () => mark(false));
  zone.addEventListener("drop", (ev) => {
    if (!ev.dataTransfer || !ev.dataTransfer.files.length) return;
    ev.preventDefault();
    mark(false);
    translateFile(ev.dataTransfer.files[0]);
  });
}

// --- attention ---------------------------------------------------------------------------------------

function onAttentionModel() {
  const info = modelInfo($("attention-model").value);
  const translator = !!info && info.task === "translation";
  document.querySelectorAll(".translator-only").forEach((n) => { n.hidden = !translator; });
  const langs = translator ? info.target_langs : [];
  $("attention-lang").replaceChildren(...langs.map((l) => el("option", { value: l }, l)));
  $("attention-lang-label").hidden = langs.length < 2;
}

function showAttentionFor(model, text, target, lang) {
  $("attention-model").value = model.split(",")[0];
  onAttentionModel();
  $("attention-text").value = text;
  $("attention-target").value = target || "";
  if (lang) $("attention-lang").value = lang;
  $("attention").scrollIntoView({ behavior: "smooth", block: "start" });
  return submitAttention();
}

function submitAttention(ev) {
  if (ev) ev.preventDefault();
  const info = modelInfo($("attention-model").value);
  const body = { model: $("attention-model").value, text: $("attention-text").value };
  if (info && info.task === "translation") {
    if ($("attention-target").value.trim()) body.target = $("attention-target").value;
    if ($("attention-lang").value) body.target_lang = $("attention-lang").value;
  }
  return run("attention", async () => {
    const att = await api("POST", "/attention", body);
    state.att = att;
    if (!hasMaps(state.kind)) state.kind = "encoder";
    if (state.head !== "avg" && state.head >= att.heads.length) state.head = "avg";
    $("attention-head").replaceChildren(el("option", { value: "avg" }, "average"),
      ...att.heads.map((h, i) => el("option", { value: i }, `${h}`)));
    for (const b of $("attention-kind").querySelectorAll("button")) b.disabled = !hasMaps(b.dataset.kind);
    $("attention-translation").hidden = !att.translation;
    $("attention-translation").textContent = att.translation ? `Greedy translation: ${att.translation}` : "";
    $("attention-view").hidden = false;
    renderAttention();
  });
}

/** Whether the response has maps of this kind (a translator's decoder and cross maps may have other layers). */
function hasMaps(kind) {
  const maps = state.att[KINDS[kind].field];
  return Boolean(maps && maps.length);
}

/** The layer numbers of a kind's maps: the encoder's, or the decoder's (stacks may differ in depth). */
function layersOf(kind) {
  return state.att[KINDS[kind].layers] || state.att.layers;
}

/** The shown layer's index for the current kind: the chosen one, or the kind's last when it has fewer (the
 * choice is kept: back on the encoder, its deeper layer shows again). */
function layerIndex() {
  return Math.min(state.layer, layersOf(state.kind).length - 1);
}

/** [layer][head][q][k] -> the (q, k) matrix for one layer and one head, or the mean over heads. */
function matrix(kind, layer, head) {
  const heads = state.att[KINDS[kind].field][layer];
  if (head !== "avg") return heads[head];
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((s, h) => s + h[q][k], 0) / heads.length));
}

function color(t) {
  const x = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const f = x - i;
  return RAMP[i].map((c, j) => Math.round(c + f * (RAMP[i + 1][j] - c)));
}

/** Draws m (rows x cols) scaled to [0, max(m)] into canvas at `cell` CSS pixels per cell. */
function drawMatrix(canvas, m, cell) {
  const rows = m.length;
  const cols = rows ? m[0].length : 0;
  const max = m.reduce((a, row) => row.reduce((b, w) => Math.max(b, w), a), 1e-9);
  const img = new ImageData(Math.max(cols, 1), Math.max(rows, 1));
  m.forEach((row, q) => row.forEach((w, k) => {
    const [r, g, b] = color(w / max);
    img.data.set([r, g, b, 255], 4 * (q * cols + k));
  }));
  const src = el("canvas");
  src.width = img.width;
  src.height = img.height;
  src.getContext("2d").putImageData(img, 0, 0);
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${cols * cell}px`;
  canvas.style.height = `${rows * cell}px`;
  canvas.width = Math.round(cols * cell * dpr);
  canvas.height = Math.round(rows * cell * dpr);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(src, 0, 0, canvas.width, canvas.height);
  return { ctx, dpr, max };
}

function renderAttention() {
  const att = state.att;
  const spec = KINDS[state.kind];
  for (const b of $("attention-kind").querySelectorAll("button")) b.setAttribute("aria-pressed", b.dataset.kind === state.kind);
  const layers = layersOf(state.kind);
  const li = layerIndex();
  $("attention-layer").replaceChildren(...layers.map((l, i) => el("option", { value: i }, `${l}`)));
  $("attention-layer").value = li;
  $("attention-head").value = state.head;
  const m = matrix(state.kind, li, state.head);
  const rowTokens = att[spec.rows];
  const colTokens = att[spec.cols];
  const canvas = $("heatmap");
  const avail = $("heatmap-wrap").closest(".panel").clientWidth - 110;
  const cell = Math.max(12, Math.min(34, Math.floor(avail / colTokens.length)));
  const { max } = drawMatrix(canvas, m, cell);
  const headName = state.head === "avg" ? "average of heads" : `head ${att.heads[state.head]}`;
  Object.assign(canvas.dataset, { rows: m.length, cols: colTokens.length, kind: state.kind,
    layer: layers[li], head: state.head === "avg" ? "avg" : att.heads[state.head], cell });
  canvas.setAttribute("aria-label", `${spec.name}, layer ${layers[li]}, ${headName}`);
  const font = `${Math.max(10, Math.min(13, cell - 3))}px`;
  $("heatmap-cols").replaceChildren(...colTokens.map((t, k) =>
    el("span", { class: "tok", title: t, dataset: { k }, style: { width: `${cell}px`, fontSize: font } }, t)));
  $("heatmap-rows").replaceChildren(...rowTokens.map((t, q) =>
    el("span", { class: "tok", title: t, dataset: { q }, style: { height: `${cell}px`, lineHeight: `${cell}px`, fontSize: font } }, t)));
  $("heatmap-caption").textContent = `${spec.name} · layer ${layers[li]} · ${headName} — rows: ${spec.rows === "source_tokens" ? "source" : "target"} tokens (queries), columns: ${spec.cols === "source_tokens" ? "source" : "target"} tokens (keys)`;
  $("legend-min").textContent = "0";
  $("legend-max").textContent = max.toFixed(3);
  $("heatmap-status").textContent = "Hover (or tap) a cell to see the token pair and its weight.";
  hideHover();
  renderGrid();
}

function renderGrid() {
  const att = state.att;
  const grid = $("heads-grid");
  const nHeads = att.heads.length + 1; // + average
  const avail = grid.parentElement.clientWidth - 40;
  const size = Math.max(28, Math.min(72, Math.floor(avail / nHeads) - 6));
  grid.style.gridTemplateColumns = `auto repeat(${nHeads}, ${size}px)`;
  const heads = [...att.heads.map((_, i) => i), "avg"];
  const children = [el("span"), ...heads.map((h) => el("span", { class: "axis" }, h === "avg" ? "avg" : `H${att.heads[h]}`))];
  layersOf(state.kind).forEach((layer, li) => {
    children.push(el("span", { class: "axis" }, `L${layer}`));
    for (const h of heads) {
      const m = matrix(state.kind, li, h);
      const c = el("canvas", { class: "thumb", "data-testid": "head-thumb", role: "button", tabindex: "0",
        title: `layer ${layer}, ${h === "avg" ? "average" : `head ${att.heads[h]}`}`,
        dataset: { layer, head: h === "avg" ? "avg" : att.heads[h] } });
      c.classList.toggle("selected", li === layerIndex() && h === state.head);
      drawMatrix(c, m, size / Math.max(m.length, m[0].length));
      const open = () => { state.layer = li; state.head = h; renderAttention(); };
      c.addEventListener("click", open);
      c.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
      children.push(el("span", { class: "cellbox", style: { width: `${size}px`, height: `${size}px` } }, c));
    }
  });
  grid.replaceChildren(...children);
}

function onHeatmapPointer(ev) {
  const canvas = $("heatmap");
  const rect = canvas.getBoundingClientRect();
  const rows = Number(canvas.dataset.rows);
  const cols = Number(canvas.dataset.cols);
  const k = Math.floor(((ev.clientX - rect.left) / rect.width) * cols);
  const q = Math.floor(((ev.clientY - rect.top) / rect.height) * rows);
  if (q < 0 || k < 0 || q >= rows || k >= cols) return hideHover();
  const spec = KINDS[state.kind];
  const w = matrix(state.kind, layerIndex(), state.head)[q][k];
  const text = `${state.att[spec.rows][q]} → ${state.att[spec.cols][k]}: ${w.toFixed(4)}`;
  $("heatmap-status").textContent = `query “${state.att[spec.rows][q]}” (row ${q}) → key “${state.att[spec.cols][k]}” (column ${k}): weight ${w.toFixed(4)}`;
  const tip = $("heatmap-tooltip");
  tip.textContent = text;
  Object.assign(tip.dataset, { q, k, query: state.att[spec.rows][q], key: state.att[spec.cols][k], weight: w });
  tip.hidden = false;
  const panel = tip.parentElement.getBoundingClientRect();
  const x = Math.min(ev.clientX - panel.left + 12, panel.width - tip.offsetWidth - 4);
  tip.style.left = `${Math.max(0, x)}px`;
  tip.style.top = `${ev.clientY - panel.top + 14}px`;
  if (!state.hover || state.hover.q !== q || state.hover.k !== k) {
    state.hover = { q, k };
    const cell = Number(canvas.dataset.cell);
    Object.assign($("heatmap-cursor").style, { left: `${k * cell}px`, top: `${q * cell}px`, width: `${cell}px`, height: `${cell}px` });
    $("heatmap-cursor").hidden = false;
    document.querySelectorAll("#heatmap-wrap .tok.hl").forEach((n) => n.classList.remove("hl"));
    $("heatmap-rows").children[q].classList.add("hl");
    $("heatmap-cols").children[k].classList.add("hl");
  }
}

function hideHover() {
  $("heatmap-tooltip").hidden = true;
  $("heatmap-cursor").hidden = true;
  document.querySelectorAll("#heatmap-wrap .tok.hl").forEach((n) => n.classList.remove("hl"));
  state.hover = null;
}

// --- wiring ------------------------------------------------------------------------------------------

function init() {
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("api-key").value.trim();
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
    $("api-key").classList.remove("invalid");
    loadModels();
  });
  $("sentiment-form").addEventListener("submit", submitSentiment);
  document.querySelectorAll("[data-example]").forEach((b) => b.addEventListener("click", () => {
    $("sentiment-text").value = b.dataset.example;
  }));
  $("translate-form").addEventListener("submit", submitTranslate);
  document.querySelectorAll("input[name=decoding]").forEach((r) => r.addEventListener("change", onDecoding));
  acceptDrops($("translate-text"));
  acceptDrops($("translate-drop"));
  $("translate-file-button").addEventListener("click", () => $("translate-file").click());
  $("translate-file").addEventListener("change", (ev) => {
    translateFile(ev.target.files[0]);
    ev.target.value = ""; // the same file chosen again is a new change
  });
  $("attention-form").addEventListener("submit", submitAttention);
  $("attention-model").addEventListener("change", onAttentionModel);
  $("attention-kind").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-kind]");
    if (b && !b.disabled) { state.kind = b.dataset.kind; renderAttention(); }
  });
  $("attention-layer").addEventListener("change", (ev) => { state.layer = Number(ev.target.value); renderAttention(); });
  $("attention-head").addEventListener("change", (ev) => {
    state.head = ev.target.value === "avg" ? "avg" : Number(ev.target.value);
    renderAttention();
  });
  $("heatmap").addEventListener("pointermove", onHeatmapPointer);
  $("heatmap").addEventListener("pointerdown", onHeatmapPointer);
  $("heatmap").addEventListener("pointerleave", (ev) => { if (ev.pointerType === "mouse") hideHover(); }); // a tap keeps its tooltip
  let resize;
  let width = window.innerWidth;
  window.addEventListener("resize", () => { // re-fit the heatmap when the width changes (not the height)
    clearTimeout(resize);
    resize = setTimeout(() => {
      if (state.att && window.innerWidth !== width) renderAttention();
      width = window.innerWidth;
    }, 150);
  });
  const stops = RAMP.map((c, i) => `rgb(${c}) ${(100 * i) / (RAMP.length - 1)}%`).join(", ");
  $("legend-ramp").style.background = `linear-gradient(to right, ${stops})`;
  onDecoding();
  loadModels();
}

document.addEventListener("DOMContentLoaded", init);
