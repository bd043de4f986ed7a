// The attn-mt lab: each panel's inputs (the elements with data-key) are posted as a JSON object of
// their texts to /api/PANEL; the server computes the panel with attn-mt's functions and the page only
// draws what comes back (tensors as tables, plots as SVG lines, the code lines that ran). The open
// panel and its inputs live in the URL's hash (#panel?key=value&...), so a link shares an example.
// Every text the page writes is English marked with t() (i18n.js), in the language of the switch; the
// panels' own sentences come from the server in the language the page asks for (?lang=).
"use strict";

const { t } = window.attnMtI18n;

const SVG = "http://www.w3.org/2000/svg";
const DEBOUNCE_MS = 250;
const ROW_CELLS = 16; // a longer vector with unnamed entries wraps into rows of this many cells
const LIVE_POLL_MS = 1000; // how often the live panel asks how a training stands
const PLOT = { width: 440, height: 220, margin: 30, left: 60 };
// Okabe and Ito's colour-blind-safe colours (and black), each at least 3:1 against white; every pair
// stays apart under protanopia, deuteranopia and tritanopia (tests/test_lab_palette.py checks both).
const COLOURS = ["#0072B2", "#D55E00", "#000000", "#CC79A7", "#009E73", "#882255"];
// Lines are told apart by their dash pattern as well as their colour.
const DASHES = ["", "7 3", "2 3", "9 3 2 3", "1 3", "12 4"];

// What the short axis names mean, in the book's words (the page's notation table has them all).
const axisNames = () => ({
  B: t("batch size"), Q: t("number of queries (the book's n)"), K: t("number of key-value pairs (the book's m)"),
  q: t("query size"), k: t("key size"), v: t("value size"), d: t("size of a query and key (per head)"),
  H: t("hidden size (num_hiddens)"), h: t("number of heads"), N: t("steps"), S: t("source positions (tokens)"),
  T: t("target positions"), L: t("layers"), F: t("FFN hidden size (ffn_num_hiddens)"),
});

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
const timers = new Map();
const counters = new Map(); // panel -> number of its latest request, so older answers are dropped

function element(tag, attributes = {}, text = "") {
  const made = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) made.setAttribute(key, value);
  if (text) made.textContent = text;
  return made;
}

// A slider marked data-below="KEY" picks an index below the value of the input KEY (a position below S).
function keepBelow(section) {
  for (const input of $$("[data-below]", section)) {
    const bound = $(`[data-key="${input.dataset.below}"]`, section);
    input.max = String(Number(bound.value) - 1);
    if (Number(input.value) > Number(input.max)) input.value = input.max;
  }
}

// A slider marked data-limit-with="KEY" data-limit="N" keeps its value times KEY's at most N (the
// number of elements the server computes), so it never offers a setting the server refuses.
function keepWithin(section) {
  for (const input of $$("[data-limit-with]", section)) {
    const other = Number($(`[data-key="${input.dataset.limitWith}"]`, section).value);
    input.dataset.ownMax = input.dataset.ownMax || input.max;
    input.max = String(Math.min(Number(input.dataset.ownMax), Math.floor(Number(input.dataset.limit) / other)));
    if (Number(input.value) > Number(input.max)) input.value = input.max;
  }
}

function panelState(section) {
  keepWithin(section);
  keepBelow(section);
  const state = {};
  for (const input of $$("[data-key]", section)) {
    state[input.dataset.key] = input.type === "checkbox" ? String(input.checked) : input.value;
  }
  return state;
}

function setInputs(section, params) {
  for (const input of $$("[data-key]", section)) {
    if (!params.has(input.dataset.key)) continue;
    const value = params.get(input.dataset.key);
    if (input.type === "checkbox") input.checked = value === "true";
    else input.value = value;
  }
  showSliderValues(section);
}

function showSliderValues(section) {
  for (const input of $$("input[type=range][data-key]", section)) {
    const out = $(`output[for="${input.id}"]`, section);
    if (out) out.textContent = input.value;
  }
}

function remember(section) {
  const params = new URLSearchParams(panelState(section));
  history.replaceState(null, "", `#${section.dataset.panel}?${params}`);
}

function open(name) {
  for (const section of $$("section.panel")) section.hidden = section.dataset.panel !== name;
  for (const tab of $$("nav a")) tab.classList.toggle("active", tab.dataset.panel === name);
}

function fromHash() {
  const raw = location.hash.slice(1);
  const cut = raw.indexOf("?");
  const name = decodeURIComponent(cut < 0 ? raw : raw.slice(0, cut));
  const section = $$("section.panel").find((s) => s.dataset.panel === name) || $("section.panel");
  if (cut >= 0 && section.dataset.panel === name) setInputs(section, new URLSearchParams(raw.slice(cut + 1)));
  return section;
}

function formatNumber(value) {
  if (value === null) return "NaN";
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 1e4 || (Math.abs(value) < 1e-3 && value !== 0)
    ? value.toExponential(2)
    : value.toFixed(4);
}

function flatten(values) {
  return Array.isArray(values) ? values.flatMap(flatten) : [values];
}

// Colour scales. Attention weights and probabilities: white at 0 to dark blue at 1, the same in every
// figure. Masks: two colours, 0 pale and 1 dark. Counts and lengths: white at 0 to dark blue at the
// largest value `bound`. Any other tensor: blue below 0, white at 0, red above, reaching `bound`.
const WHITE = [247, 251, 255];
const BLUE = [8, 81, 156];
const RED = [165, 15, 21];
const MASK_OFF = [240, 240, 240];
const MASK_ON = [55, 55, 55];
const FIXED = new Set(["weights", "probability"]); // 0 to 1 whatever the values

function mixed(from, to, share) {
  const c = from.map((f, k) => Math.round(f + (to[k] - f) * share));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

function shade(value, scale, bound) {
  if (value === null) return "#d9d9d9"; // NaN
  if (FIXED.has(scale)) return mixed(WHITE, BLUE, Math.min(1, Math.max(0, value)));
  if (scale === "binary") return mixed(MASK_OFF, MASK_ON, value >= 0.5 ? 1 : 0);
  if (scale === "sequential") return mixed(WHITE, BLUE, bound > 0 ? Math.min(1, Math.max(0, value / bound)) : 0);
  const share = bound > 0 ? Math.min(1, Math.abs(value) / bound) : 0;
  return mixed(WHITE, value < 0 ? BLUE : RED, share);
}

function darkness(value, scale, bound) {
  if (value === null) return 0;
  if (FIXED.has(scale)) return value;
  if (scale === "binary") return value >= 0.5 ? 1 : 0;
  return bound > 0 ? Math.abs(value) / bound : 0;
}

// The legend under a tensor: its colour scale with labelled ends and middle.
const legendTitles = () => ({
  weights: t("attention weight, fixed scale:"),
  probability: t("probability, fixed scale:"),
  binary: t("mask, two values:"),
  sequential: t("value, from 0:"),
  centred: t("value, scale centred at 0:"),
});

function legend(scale, bound) {
  const box = element("div", { class: "legend", "data-scale": scale });
  let stops = [-1, -0.5, 0, 0.5, 1].map((v) => shade(v * bound, scale, bound));
  let ends = [formatNumber(-bound), "0", formatNumber(bound)];
  if (FIXED.has(scale)) {
    stops = [0, 0.5, 1].map((v) => shade(v, scale, 1));
    ends = ["0", "0.5", "1"];
  } else if (scale === "binary") {
    stops = [0, 0, 1, 1].map((v) => shade(v, scale, 1)); // two blocks, no gradient between them
    ends = ["0", "1"];
  } else if (scale === "sequential") {
    stops = [0, 0.5, 1].map((v) => shade(v * bound, scale, bound));
    ends = ["0", formatNumber(bound / 2), formatNumber(bound)];
  }
  box.append(element("span", { class: "legend-title" }, legendTitles()[scale]));
  const bar = element("span", { class: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${scale === "binary"
    ? `${stops[0]} 0 50%, ${stops[2]} 50% 100%` : stops.join(", ")})`;
  const labels = element("span", { class: "legend-labels" });
  for (const end of ends) labels.append(element("span", { class: "legend-label" }, end));
  bar.append(labels);
  box.append(bar);
  return box;
}

// A slice's place along one axis: layers and heads counted from 1 as in every other label of the page
// (lines, grid, step-through); other axes as the index the code uses. An axis named by its size (the
// "1" of an unsqueezed tensor) has one place only, so it names none.
function sliceName(axis, k) {
  if (/^[0-9]+$/.test(axis)) return "";
  if (axis === "L") return t("layer {n}", { n: k + 1 });
  if (axis === "h") return t("head {n}", { n: k + 1 });
  return `${axis}=${k}`;
}

// A list cut into pieces of `size` (the last may be shorter).
function chunks(list, size) {
  return Array.from({ length: Math.ceil(list.length / size) }, (_, k) => list.slice(k * size, (k + 1) * size));
}

// One 2-D slice (rows x columns) of a tensor as a table; `index` is the slice's leading indices.
function matrixTable(tensor, rows, index, bound) {
  const table = element("table", { class: "matrix" });
  // labels that are tokens (all, or "rows": the rows' only), kept as the model reads them
  const tokens = tensor.tokens ? " token-label" : "";
  const columnTokens = tensor.tokens === true ? " token-label" : "";
  if (tensor.columns) {
    const head = element("tr");
    head.append(element("th"));
    for (const label of tensor.columns) head.append(element("th", { class: `column-label${columnTokens}` }, label));
    table.append(head);
  }
  const marks = index.length === 0 ? tensor.marks || {} : {}; // a chosen row or column, outlined
  rows.forEach((row, i) => {
    const tr = element("tr");
    const classes = `${(marks.rows || []).includes(i) ? "row-label marked" : "row-label"}${tokens}`;
    tr.append(element("th", { class: classes }, tensor.rows ? tensor.rows[i] : String(i)));
    const cells = Array.isArray(row) ? row : [row];
    cells.forEach((value, j) => {
      const at = Array.isArray(row) ? [...index, i, j] : [...index, i];
      const masked = at.reduce((part, k) => part?.[k], tensor.masked);
      const hover = at.reduce((part, k) => part?.[k], tensor.hover);
      const td = element("td", { class: masked ? "cell masked" : "cell", "data-value": String(value),
                                 "data-index": at.join(",") }, formatNumber(value));
      td.style.background = masked ? "" : shade(value, tensor.scale, bound);
      if (darkness(value, tensor.scale, bound) > 0.6) td.classList.add("dark");
      if ((marks.rows || []).includes(i)) td.classList.add("marked-row");
      if ((marks.columns || []).includes(j)) td.classList.add("marked-column");
      if (hover) {
        td.title = hover;
        td.tabIndex = 0; // reachable by keyboard: focusing the cell writes its entry out under the figure
        td.setAttribute("aria-label", hover);
      }
      tr.append(td);
    });
    table.append(tr);
  });
  return table;
}

// Every 2-D slice of a tensor of any rank: 1-D as one row, 3-D and 4-D as labelled slices.
function slices(tensor, values, index, bound, into) {
  const depth = tensor.shape.length - index.length;
  if (depth <= 2) {
    const label = index.map((k, a) => sliceName(tensor.axes[a], k)).filter(Boolean).join(", ");
    const box = element("div", { class: "slice" });
    if (label) box.append(element("div", { class: "slice-label" }, label));
    if (depth === 1) {
      // A vector: one row, or, when long and its entries unnamed, rows of ROW_CELLS labelled by the
      // first and last index they hold, so it stays on the page; data-index stays the entry's index.
      const wrap = !tensor.columns && values.length > ROW_CELLS;
      const cut = (list) => (wrap ? chunks(list, ROW_CELLS) : [list]);
      const rows = cut(values);
      const named = wrap ? rows.map((row, k) => `${k * ROW_CELLS}–${k * ROW_CELLS + row.length - 1}`) : tensor.rows;
      const table = matrixTable({ ...tensor, rows: named, masked: tensor.masked && cut(tensor.masked),
                                  hover: tensor.hover && cut(tensor.hover) }, rows, [], bound);
      for (const td of $$("td", table)) {
        const [i, j] = td.dataset.index.split(",").map(Number);
        td.dataset.index = String(i * ROW_CELLS + j);
      }
      box.append(table);
    } else {
      box.append(matrixTable(tensor, values, index, bound));
    }
    into.append(box);
    return;
  }
  values.forEach((part, k) => slices(tensor, part, [...index, k], bound, into));
}

function drawTensor(tensor) {
  const figure = element("figure", { class: "tensor", "data-name": tensor.name });
  const names = axisNames();
  const shape = tensor.shape.map((n, a) => {
    const axis = tensor.axes[a];
    return names[axis] ? `${axis} = ${n}: ${names[axis]}` : `${axis} = ${n}`;
  }).join("; ");
  const caption = element("figcaption");
  caption.append(element("b", {}, tensor.name), ` (${tensor.axes.join(", ")}) = (${tensor.shape.join(", ")})`);
  caption.title = shape;
  figure.append(caption);
  const all = flatten(tensor.values);
  const kept = (tensor.masked ? all.filter((_, k) => !flatten(tensor.masked)[k]) : all).filter((v) => v !== null);
  const bound = kept.reduce((most, v) => Math.max(most, Math.abs(v)), 0);
  const box = element("div", { class: all.length > 400 ? "slices dense" : "slices" });
  slices(tensor, tensor.values, [], bound, box);
  figure.append(box, legend(tensor.scale, bound));
  if (tensor.note) figure.append(element("p", { class: "note" }, tensor.note));
  if (tensor.hover) figure.append(...writtenOut(tensor, box));
  if ((tensor.views || []).includes("lines")) figure.append(drawLines(tensor));
  if ((tensor.views || []).includes("grid")) figure.append(drawGrid(tensor));
  return figure;
}

// What a cell's hover says, readable without a mouse: the focused cell's text in a line under the figure,
// and every entry's in a list that opens on request.
function writtenOut(tensor, box) {
  const focused = element("p", { class: "note focused-entry", "aria-live": "polite" },
    t("Point at or focus (Tab) a cell to write it out here."));
  box.addEventListener("focusin", (event) => {
    if (event.target.title) focused.textContent = event.target.title;
  });
  box.addEventListener("mouseover", (event) => {
    if (event.target.title) focused.textContent = event.target.title;
  });
  const all = element("details", { class: "written-out" });
  all.append(element("summary", {}, t("every entry written out")));
  const list = element("ol");
  for (const cell of $$("td[title]", box)) {
    list.append(element("li", {}, `[${cell.dataset.index}] ${cell.title}`));
  }
  all.append(list);
  return [focused, all];
}

// BertViz-style lines of an (L, h, Q, K) tensor: per layer, queries on the left, keys on the right, one
// line per head and pair, in the head's colour, its opacity the weight; every head overlaid, and each
// head can be hidden (its box in the key) to read the others.
const LINES = { width: 620, rowStep: 30, top: 44, queries: 200, keys: 420 };

function drawLines(tensor) {
  const [layers, heads, queries, keys] = tensor.shape;
  const { width, rowStep, top } = LINES;
  const height = top + rowStep * Math.max(queries, keys);
  const box = element("div", { class: "lines" });
  for (let layer = 0; layer < layers; layer++) {
    const svg = element("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "token-lines",
                                     "data-layer": String(layer) });
    svg.append(element("svg:text", { x: width / 2, y: 18, class: "axis-label lines-title" },
                       t("layer {n}: queries → keys", { n: layer + 1 })));
    const y = (i) => top + i * rowStep;
    for (let head = 0; head < heads; head++) {
      for (let i = 0; i < queries; i++) {
        for (let j = 0; j < keys; j++) {
          const weight = tensor.values[layer][head][i][j];
          if (weight < 0.02) continue;
          svg.append(element("svg:line", { x1: LINES.queries, y1: y(i) - 5, x2: LINES.keys, y2: y(j) - 5,
            class: "token-line", stroke: COLOURS[head % COLOURS.length], "stroke-opacity": weight.toFixed(4),
            "stroke-width": 3, "stroke-dasharray": DASHES[head % DASHES.length],
            "data-head": String(head), "data-query": String(i), "data-key": String(j),
            "data-weight": String(weight) }));
        }
      }
    }
    (tensor.rows || []).forEach((label, i) => svg.append(element("svg:text", { x: LINES.queries - 8, y: y(i),
      class: "tick token-label" }, label)));
    (tensor.columns || []).forEach((label, j) => svg.append(element("svg:text", { x: LINES.keys + 8, y: y(j),
      class: "axis-label start token-label" }, label)));
    box.append(svg);
  }
  const key = element("p", { class: "note lines-key" });
  for (let head = 0; head < heads; head++) {
    const shown = element("input", { type: "checkbox", class: "head-shown", "data-head": String(head) });
    shown.checked = true;
    shown.addEventListener("change", () => {
      for (const line of $$(`line.token-line[data-head="${head}"]`, box)) line.style.display = shown.checked ? "" : "none";
    });
    const label = element("label", { style: `color: ${COLOURS[head % COLOURS.length]}` });
    label.append(shown, " ■ " + t("head {n}", { n: head + 1 }));
    key.append(label, " ");
  }
  key.append(t("(untick a head to hide its lines; lines under weight 0.02 left out)"));
  box.append(key);
  return box;
}

// Every head of every layer as a small heatmap on the fixed 0-1 scale: rows layers, columns heads.
function drawGrid(tensor) {
  const [layers, heads, queries, keys] = tensor.shape;
  const cell = Math.max(2, Math.min(8, Math.floor(90 / Math.max(queries, keys))));
  const table = element("table", { class: "grid" });
  const head = element("tr");
  head.append(element("th"));
  for (let h = 0; h < heads; h++) head.append(element("th", {}, t("head {n}", { n: h + 1 })));
  table.append(head);
  for (let layer = 0; layer < layers; layer++) {
    const tr = element("tr");
    tr.append(element("th", {}, t("layer {n}", { n: layer + 1 })));
    for (let h = 0; h < heads; h++) {
      const svg = element("svg:svg", { width: cell * keys, height: cell * queries, class: "thumb",
                                       "data-layer": String(layer), "data-head": String(h) });
      for (let i = 0; i < queries; i++) {
        for (let j = 0; j < keys; j++) {
          svg.append(element("svg:rect", { x: j * cell, y: i * cell, width: cell, height: cell,
            fill: shade(tensor.values[layer][h][i][j], "weights", 1) }));
        }
      }
      const td = element("td");
      td.append(svg);
      tr.append(td);
    }
    table.append(tr);
  }
  return table;
}

function drawPlot(plot) {
  const { width, height, margin, left } = PLOT;
  const figure = element("figure", { class: "plot", "data-title": plot.title });
  figure.append(element("figcaption", {}, plot.title));
  const svg = element("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  const xs = plot.series.flatMap((s) => s.x);
  const ys = plot.series.flatMap((s) => s.y);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const px = (x) => left + ((x - x0) / (x1 - x0 || 1)) * (width - left - margin);
  const py = (y) => height - margin - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * margin);
  svg.append(element("svg:line", { x1: left, y1: height - margin, x2: width - margin,
                                   y2: height - margin, class: "axis" }));
  svg.append(element("svg:line", { x1: left, y1: margin, x2: left, y2: height - margin, class: "axis" }));
  svg.append(element("svg:text", { x: width / 2, y: height - 6, class: "axis-label" }, plot.xlabel));
  svg.append(element("svg:text", { x: 4, y: 14, class: "axis-label start" }, plot.ylabel));
  svg.append(element("svg:text", { x: left - 4, y: py(y1) + 4, class: "tick" }, formatNumber(y1)));
  svg.append(element("svg:text", { x: left - 4, y: py(y0), class: "tick" }, formatNumber(y0)));
  svg.append(element("svg:text", { x: px(x1), y: height - margin + 14, class: "tick" }, formatNumber(x1)));
  svg.append(element("svg:text", { x: px(x0), y: height - margin + 14, class: "tick" }, formatNumber(x0)));
  plot.series.forEach((series, k) => {
    const colour = COLOURS[k % COLOURS.length];
    const dash = DASHES[k % DASHES.length];
    const group = element("svg:g", { class: "series", "data-label": series.label,
                                     "data-y": JSON.stringify(series.y) });
    if (series.points) {
      series.x.forEach((x, i) => group.append(element("svg:circle", {
        cx: px(x), cy: py(series.y[i]), r: 2.5, fill: colour, opacity: 0.6 })));
    } else {
      const points = series.x.map((x, i) => `${px(x)},${py(series.y[i])}`).join(" ");
      group.append(element("svg:polyline", { points, fill: "none", stroke: colour, "stroke-width": 2,
                                             "stroke-dasharray": dash }));
      group.append(element("svg:line", { x1: width - margin - 26, y1: margin + 14 * k - 4, x2: width - margin - 4,
        y2: margin + 14 * k - 4, stroke: colour, "stroke-width": 2, "stroke-dasharray": dash }));
    }
    group.append(element("svg:text", { x: width - margin - (series.points ? 0 : 30), y: margin + 14 * k,
                                       style: `fill: ${colour}`, class: "legend" }, series.label));
    svg.append(group);
  });
  figure.append(svg);
  return figure;
}

// A path from the first token to the last: n tokens on a line, one arc per layer (or step) it takes.
function drawPath(path) {
  const width = 440;
  const height = 90;
  const step = (width - 40) / Math.max(1, path.n - 1);
  const x = (i) => 20 + i * step;
  const hops = path.reached.length - 1;
  const figure = element("figure", { class: "path", "data-label": path.label, "data-hops": String(hops) });
  const named = { label: path.label, hops }; // one object: the catalogue extraction reads t()'s first argument
  figure.append(element("figcaption", {}, t("{label}: path length {hops}", named)));
  const svg = element("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  for (let i = 0; i < path.n; i++) {
    svg.append(element("svg:circle", { cx: x(i), cy: height - 14, r: Math.min(4, step / 3), class: "token" }));
  }
  path.reached.slice(1).forEach((to, k) => {
    const from = path.reached[k];
    const lift = Math.min(height - 24, 10 + (x(to) - x(from)) / 2);
    svg.append(element("svg:path", {
      d: `M ${x(from)} ${height - 14} Q ${(x(from) + x(to)) / 2} ${height - 14 - 2 * lift} ${x(to)} ${height - 14}`,
      class: "hop", fill: "none", stroke: COLOURS[k % 2], "stroke-width": 1.5 }));
  });
  svg.append(element("svg:text", { x: 20, y: height - 1, class: "axis-label start" }, t("token 1")));
  svg.append(element("svg:text", { x: width - 20, y: height - 1, class: "tick" }, t("token n = {n}", { n: path.n })));
  figure.append(svg);
  return figure;
}

// The Transformer's encoder-decoder as boxes, bottom to top, each a link to the panel that shows it and
// labelled with its live shape; the encoder's output feeds every decoder block's encoder-decoder attention.
function drawDiagram(diagram) {
  const box = { width: 300, height: 40, gap: 10 };
  const columns = [["encoder", 20], ["decoder", 380]];
  const rows = Math.max(diagram.encoder.length, diagram.decoder.length);
  const height = rows * (box.height + box.gap) + 50;
  const width = 720;
  const figure = element("figure", { class: "diagram" });
  figure.append(element("figcaption", {},
    t("the Transformer on your sentence (blocks repeated L = {layers} times)", { layers: diagram.layers })));
  const svg = element("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "architecture" });
  const defs = element("svg:defs");
  const marker = element("svg:marker", { id: "arrow", markerWidth: 8, markerHeight: 8, refX: 6, refY: 4,
                                          orient: "auto" });
  marker.append(element("svg:path", { d: "M0,0 L8,4 L0,8 z", fill: "#8a949e" }));
  defs.append(marker);
  svg.append(defs);
  const top = (k) => height - 20 - (k + 1) * (box.height + box.gap);
  const centres = {};
  for (const [side, x] of columns) {
    diagram[side].forEach((block, k) => {
      const y = top(k);
      const link = element("svg:a", { href: block.link, class: "block", "data-side": side, "data-id": block.id,
                                      "data-name": block.name, "data-shape": block.shape });
      const repeated = side === "encoder" ? k >= 2 : k >= 2 && k < diagram[side].length - 1;
      link.append(element("svg:rect", { x, y, width: box.width, height: box.height, rx: 5,
                                        class: repeated ? "block repeated" : "block" }));
      link.append(element("svg:text", { x: x + 8, y: y + 16, class: "block-name" }, block.name));
      link.append(element("svg:text", { x: x + 8, y: y + 32, class: "block-shape" }, block.shape));
      svg.append(link);
      if (k > 0) {
        svg.append(element("svg:line", { x1: x + box.width / 2, y1: y + box.height + box.gap, x2: x + box.width / 2,
                                         y2: y + box.height + 2, class: "flow", "marker-end": "url(#arrow)" }));
      }
      centres[`${side}:${k}`] = y;
    });
  }
  const encoderTop = centres[`encoder:${diagram.encoder.length - 1}`];
  const cross = diagram.decoder.findIndex((b) => b.id === "cross_attention"); // names are translated, ids are not
  svg.append(element("svg:path", { d: `M ${20 + box.width} ${encoderTop + 20} C 350 ${encoderTop + 20}, 340 ${centres[`decoder:${cross}`] + 20}, 378 ${centres[`decoder:${cross}`] + 20}`,
                                   class: "flow", fill: "none", "marker-end": "url(#arrow)" }));
  svg.append(element("svg:text", { x: 20, y: 14, class: "axis-label start" },
    t("shaded blocks repeat L times; click a block to open its panel")));
  figure.append(svg);
  return figure;
}

// The search as a tree: one column per step, a node per live hypothesis (its last token and score so
// far) joined to the hypothesis it extends; the best output's path drawn bold, finished ones marked.
function drawTree(tree) {
  const steps = Math.max(...tree.nodes.map((n) => n.step)) + 1;
  const perStep = Array.from({ length: steps }, (_, step) => tree.nodes.filter((n) => n.step === step));
  const rows = Math.max(...perStep.map((column) => column.length));
  const width = 40 + steps * 120;
  const height = 30 + rows * 34;
  const at = new Map();
  perStep.forEach((column, step) => column.forEach((node, k) => at.set(node.prefix.join(","), [20 + step * 120, 30 + k * 34])));
  const best = tree.best.join(",");
  const onBest = (prefix) => best === prefix.join(",") || best.startsWith(`${prefix.join(",")},`) || prefix.length === 0;
  const finished = new Set(tree.finished.map((f) => f.prefix.join(",")));
  const figure = element("figure", { class: "tree" });
  figure.append(element("figcaption", {},
    t("the search as a tree: each step's live hypotheses (token, log-probability so far)")));
  const svg = element("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  for (const node of tree.nodes) {
    const [x, y] = at.get(node.prefix.join(","));
    if (node.parent !== null && at.has(node.parent.join(","))) {
      const [px, py] = at.get(node.parent.join(","));
      svg.append(element("svg:line", { x1: px + 90, y1: py, x2: x, y2: y,
        class: onBest(node.prefix) ? "edge best" : "edge" }));
    }
    const group = element("svg:g", { class: onBest(node.prefix) ? "node best" : "node",
      "data-prefix": node.prefix.join(","), "data-step": String(node.step), "data-score": String(node.score) });
    group.append(element("svg:text", { x, y: y - 2, class: "node-token" }, node.token));
    group.append(element("svg:text", { x, y: y + 10, class: "node-score" },
      formatNumber(node.score) + (finished.has(node.prefix.join(",")) ? " · <eos>" : "")));
    svg.append(group);
  }
  figure.append(svg);
  return figure;
}

function drawCode(lines) {
  const list = element("ul", { class: "code" });
  for (const line of lines) {
    const item = element("li");
    const link = element("a", { href: line.url, target: "_blank" }, `${line.file}:${line.line}`);
    item.append(link, ` ${line.label}`);
    list.append(item);
  }
  return list;
}

function draw(section, result) {
  const out = $(".result", section);
  out.replaceChildren();
  if (result.text) {
    for (const [key, value] of Object.entries(result.text)) {
      out.append(element("p", { class: "text", "data-key": key }, value));
    }
  }
  for (const note of result.notes) out.append(element("p", { class: "note" }, note));
  const figures = element("div", { class: "figures" });
  for (const plot of result.plots) figures.append(drawPlot(plot));
  for (const tensor of result.tensors) figures.append(drawTensor(tensor));
  for (const path of result.paths || []) figures.append(drawPath(path));
  if (result.diagram) out.append(drawDiagram(result.diagram));
  if (result.tree) out.append(drawTree(result.tree));
  out.append(figures);
  for (const exercise of result.exercises || []) out.append(drawExercise(exercise));
  if (result.code.length) out.append(element("h3", {}, t("attn-mt code that ran")), drawCode(result.code));
}

// Exercises, predict first: the listing holds the questions only. An exercise's experiment runs on the
// server when the learner commits a prediction (the button, or Enter), and the page shows whether the
// result bears it out. Predictions and answers are kept here, so leaving the tab loses none of them. A
// prediction is kept by its choice's id, the same in every language; after a language switch each
// committed exercise asks for its answer again in the new language (its prediction committed already).
const predictions = new Map(); // exercise name -> { choice (id), pending, answered (the server's answer), lang }

function drawExercise(exercise) {
  const box = element("form", { class: "exercise", "data-name": exercise.name });
  box.append(element("h3", {}, `${exercise.section}: ${exercise.question}`));
  const options = element("fieldset", { class: "choices" });
  options.append(element("legend", {}, t("your prediction, before the experiment runs:")));
  for (const choice of exercise.choices) { // the value is the choice's id; its text, the page's language
    const label = element("label");
    label.append(element("input", { type: "radio", name: `guess-${exercise.name}`, value: choice.id, class: "guess" }),
                 ` ${choice.text}`);
    options.append(label);
  }
  const commit = element("button", { type: "submit", class: "commit" }, t("commit my prediction and run the experiment"));
  const mine = element("p", { class: "mine", role: "status" });
  const answer = element("div", { class: "answer" });
  box.append(options, commit, mine, answer);
  const kept = predictions.get(exercise.name) || {};
  const chosen = () => $$("input.guess", box).find((r) => r.checked);
  if (kept.choice) {
    for (const radio of $$("input.guess", box)) radio.checked = radio.value === kept.choice;
  }
  if (kept.pending || kept.answered) lockExercise(box);
  if (kept.pending || (kept.answered && kept.lang !== attnMtI18n.language())) {
    const prediction = choiceText(exercise.choices, kept.choice);
    mine.textContent = t("you predicted: {prediction}; running the experiment…", { prediction });
    if (kept.answered) answer.append(element("p", { class: "note" }, t("computing…"))); // until it is translated
    if (!kept.pending) askExercise(exercise.name, kept.choice);
  } else if (kept.answered) {
    drawAnswer(box, kept.answered);
  }
  box.addEventListener("change", () => {
    if (chosen()) predictions.set(exercise.name, { ...predictions.get(exercise.name), choice: chosen().value });
  });
  box.addEventListener("keydown", (event) => { // Enter on a prediction commits it (links keep their Enter)
    if (event.key === "Enter" && event.target.classList.contains("guess")) {
      event.preventDefault();
      box.requestSubmit();
    }
  });
  box.addEventListener("submit", (event) => {
    event.preventDefault();
    if (commit.disabled) return;
    const picked = chosen();
    if (!picked) {
      mine.textContent = t("choose what you expect first");
      return;
    }
    lockExercise(box);
    const prediction = choiceText(exercise.choices, picked.value);
    mine.textContent = t("you predicted: {prediction}; running the experiment…", { prediction });
    mine.className = "mine";
    askExercise(exercise.name, picked.value);
  });
  return box;
}

function lockExercise(box, locked = true) {
  for (const input of [...$$("input.guess", box), $("button.commit", box)]) input.disabled = locked;
}

// The text of the choice whose id is `id`, among an exercise's choices ({ id, text }).
function choiceText(choices, id) {
  const found = choices.find((choice) => choice.id === id);
  return found ? found.text : id;
}

// Run an exercise's experiment for the committed prediction `choice` (an id), in the page's language, and
// show the answer in the exercise's box on the page when it arrives (the panel redraws its boxes when the
// learner comes back to its tab or switches the language: the box shown then).
async function askExercise(name, choice) {
  const kept = predictions.get(name) || {};
  const lang = attnMtI18n.language();
  predictions.set(name, { ...kept, choice, pending: true });
  let response;
  let body;
  let why = "";
  try {
    response = await fetch(`/api/exercises?lang=${lang}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ exercise: name, prediction: choice }),
    });
    body = await response.json();
    if (!response.ok) why = `${body.error} (HTTP ${response.status})`;
  } catch (error) {
    why = t("the lab did not answer: {error}", { error }) + (response ? ` (HTTP ${response.status})` : "");
  }
  const box = $$("#panel-exercises .exercise").find((shown) => shown.dataset.name === name);
  if (why) { // the prediction is open again, so it can be committed once more; a kept answer stays
    predictions.set(name, { ...kept, choice, pending: false });
    if (!box) return;
    const mine = $("p.mine", box);
    if (kept.answered) {
      drawAnswer(box, kept.answered);
      mine.textContent += ` (${why})`;
      return;
    }
    lockExercise(box, false);
    mine.textContent = t("{why}; commit again to run the experiment", { why });
    mine.className = "mine failed";
    return;
  }
  const answered = body.exercises[0];
  predictions.set(name, { choice, answered, lang });
  if (!box) return;
  if (lang === attnMtI18n.language()) drawAnswer(box, answered);
  else askExercise(name, choice); // the language changed while it ran: the answer in this one
}

// The verdict, and, when the experiment accepts more than one prediction (a gap within seed noise, or
// the book's answer where attn-mt differs by design), which ones and why the learner's holds.
function drawAnswer(box, answered) {
  const mine = $("p.mine", box);
  const answer = $("div.answer", box);
  const verdict = { prediction: choiceText(answered.choices, answered.prediction), outcome: answered.outcome };
  const choices = answered.accepted.map((id) => choiceText(answered.choices, id)).join("; ");
  mine.textContent = t("you predicted: {prediction}. The experiment: {outcome}.", verdict) + " "
    + (answered.right ? t("Your prediction holds.") : t("Your prediction does not hold."));
  mine.className = answered.right ? "mine right" : "mine wrong";
  answer.replaceChildren(element("p", { class: "found" }, answered.found));
  if (answered.accepted.length > 1) {
    answer.append(element("p", { class: "accepted" }, t("Accepted: {choices}.", { choices })));
  }
  if (answered.why) answer.append(element("p", { class: "why" }, answered.why));
  const figures = element("div", { class: "figures" });
  for (const tensor of answered.tensors) figures.append(drawTensor(tensor));
  answer.append(figures, element("p", { class: "note" }, answered.reading));
  answer.append(element("a", { href: answered.link }, t("try it in its panel")), drawCode(answered.code));
}

// Compute a panel; `keepUrl` leaves the address as it is (the first answer after the page opens).
async function compute(section, keepUrl = false) {
  const name = section.dataset.panel;
  const number = (counters.get(name) || 0) + 1;
  counters.set(name, number);
  if (!keepUrl) remember(section);
  const status = $(".status", section);
  status.textContent = t("computing…");
  status.className = "status";
  let response;
  let body;
  try {
    response = await fetch(`/api/${name}?lang=${attnMtI18n.language()}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(panelState(section)),
    });
    body = await response.json();
  } catch (error) {
    if (counters.get(name) !== number) return;
    status.textContent = t("the lab did not answer: {error}", { error });
    status.className = "status error";
    return;
  }
  if (counters.get(name) !== number) return;
  status.dataset.code = String(response.status);
  if (!response.ok) {
    status.textContent = `${body.error} (HTTP ${response.status})`;
    status.className = "status error";
    $(".result", section).replaceChildren(); // no picture of the inputs before stays under the error
    return;
  }
  status.textContent = name === "exercises" ? "" : t("computed on the server by the code below");
  status.className = "status done";
  // A slider marked data-below-answer="KEY" stays below the answer's KEY (the search's number of steps).
  for (const input of $$("[data-below-answer]", section)) {
    const bound = body[input.dataset.belowAnswer];
    if (Number.isInteger(bound)) input.max = String(bound - 1);
  }
  showSliderValues(section);
  draw(section, body);
  if (name === "live") followLive(section, body);
}

// The live panel: back to asking for the status, asked again while training runs; a run that finished
// joins every run list of the page.
function followLive(section, body) {
  $("#live-action", section).value = "status";
  remember(section);
  if (body.state === "running") setTimeout(() => compute(section, true), LIVE_POLL_MS);
  if (!body.opened) return;
  for (const select of $$("select.runs")) {
    const fits = !select.dataset.model || select.dataset.model === body.model;
    if (fits && ![...select.options].some((option) => option.value === body.opened)) {
      select.append(element("option", { value: body.opened }, `${body.opened} (${body.model}, last.pt)`));
    }
  }
}

// A play button steps its slider forward at the speed its data-speed input asks (points per second):
// each frame shows the point the clock has reached, skipping those the server could not answer in time,
// so N points play in N / speed seconds however long an answer takes. A second click pauses.
function play(button, section) {
  const slider = $(`#${button.dataset.play}`, section);
  const speed = $(`#${button.dataset.speed}`, section);
  let playing = false;
  let started = 0; // performance.now() when the clock was set, and the point shown then
  let from = 0;
  const rate = () => Math.max(0.1, Number(speed.value) || 1);
  const setClock = () => {
    started = performance.now();
    from = Number(slider.value);
  };
  const stop = () => {
    playing = false;
    button.textContent = t("play");
  };
  const advance = async () => {
    if (!playing) return;
    const last = Number(slider.max);
    const due = Math.min(last, from + Math.floor(((performance.now() - started) / 1000) * rate()));
    if (due > Number(slider.value)) {
      slider.value = String(due);
      showSliderValues(section);
      await compute(section);
      if (!playing) return;
    }
    if (Number(slider.value) >= Number(slider.max)) {
      stop();
      return;
    }
    const next = started + ((Number(slider.value) + 1 - from) / rate()) * 1000; // the next point's time
    setTimeout(advance, Math.max(0, next - performance.now()));
  };
  speed.addEventListener("input", setClock); // a new speed counts from the point shown now
  button.addEventListener("click", () => {
    playing = !playing;
    button.textContent = playing ? t("pause") : t("play");
    if (!playing) return;
    if (Number(slider.value) >= Number(slider.max)) slider.value = slider.min;
    setClock();
    advance();
  });
}

// An input marked data-resets="KEY ..." (a new sentence, run or beam) sets those inputs back to their
// first value: a step or row of the search before means nothing in the new one.
function resetFollowers(section, input) {
  for (const key of (input.dataset.resets || "").split(" ").filter(Boolean)) {
    const follower = $(`[data-key="${key}"]`, section);
    follower.value = follower.type === "range" ? follower.min : "";
  }
}

function schedule(section, delay) {
  clearTimeout(timers.get(section));
  timers.set(section, setTimeout(() => compute(section), delay));
}

// The texts the page holds outside the data-i18n elements: the runs' labels and the placeholders.
function relabel(listing) {
  for (const option of $$("select.runs option")) {
    const run = listing.runs.find((r) => r.name === option.value);
    if (run) option.textContent = t("{name} ({model}, {checkpoint}, step {step})", run);
  }
  $("#decoding-layer").placeholder = t("last");
}

// The page's language: the switch's (kept in the browser), else the lab's --lang, else the browser's.
// A failed catalogue leaves the page in English. Switching redraws the open panel in the new language.
async function speak(listing) {
  try {
    await attnMtI18n.load();
  } catch {
    // no catalogue: the page's English stays
  }
  attnMtI18n.switcher($("#language"));
  relabel(listing);
  document.addEventListener("attn-mt-language", () => {
    relabel(listing);
    const open = $$("section.panel").find((section) => !section.hidden);
    if (open) compute(open, true);
  });
}

async function start() {
  const listing = await (await fetch("/api/panels")).json();
  for (const select of $$("select.runs")) {
    const wanted = select.dataset.model;
    for (const run of listing.runs.filter((r) => !wanted || r.model === wanted)) {
      select.append(element("option", { value: run.name }));
    }
  }
  await speak(listing);
  for (const section of $$("section.panel")) {
    for (const input of $$("[data-key]", section)) {
      const delay = input.tagName === "TEXTAREA" || input.type === "text" ? DEBOUNCE_MS : 0;
      input.addEventListener(input.tagName === "SELECT" || input.type === "checkbox" ? "change" : "input",
        () => { resetFollowers(section, input); showSliderValues(section); schedule(section, delay); });
    }
    for (const button of $$("button[data-play]", section)) play(button, section);
    for (const button of $$("button[data-action]", section)) {
      button.addEventListener("click", () => {
        $('[data-key="action"]', section).value = button.dataset.action;
        compute(section);
      });
    }
    for (const button of $$("button[data-set]", section)) {
      button.addEventListener("click", () => {
        setInputs(section, new URLSearchParams(button.dataset.set));
        schedule(section, 0);
      });
    }
  }
  for (const tab of $$("nav a")) {
    tab.addEventListener("click", (event) => {
      event.preventDefault();
      const section = $(`section.panel[data-panel="${tab.dataset.panel}"]`);
      open(section.dataset.panel);
      compute(section);
    });
  }
  window.addEventListener("hashchange", () => {
    const section = fromHash();
    open(section.dataset.panel);
    compute(section, true);
  });
  const section = fromHash();
  open(section.dataset.panel);
  showSliderValues(section);
  compute(section, true);
}

start();
