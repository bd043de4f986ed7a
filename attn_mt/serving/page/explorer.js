// The attention explorer: sends the text to POST /translate with attention on, shows the n-best
// list, and draws the chosen attention map as an SVG heatmap (rows: queries, columns: keys). Text of
// several sentences is translated sentence by sentence (unless unticked); each has its own maps.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const CELL = 30; // pixels per heatmap cell
const CHAR = 7.5; // approximate pixels per label character
const MAP_TITLES = {
  cross: "encoder-decoder attention",
  encoder_self: "encoder self-attention",
  decoder_self: "decoder self-attention",
};
const AVERAGE = "average";
const LEGEND_WIDTH = 160; // pixels of the colour scale

const $ = (id) => document.getElementById(id);
let current = null; // the attention on show: of the translated text, or of one of its sentences
let parts = []; // the sentences of the last translated text, each with its attention

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function fillSelect(select, entries) {
  const previous = select.value;
  select.replaceChildren();
  for (const [value, label] of entries) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    select.append(option);
  }
  if (entries.some(([value]) => value === previous)) select.value = previous;
}

// Row and column labels of a map: queries and keys.
function labels(attention, name) {
  if (name === "encoder_self") return [attention.source_tokens, attention.source_tokens];
  if (name === "decoder_self") return [attention.output_tokens, attention.decoder_input_tokens];
  return [attention.output_tokens, attention.source_tokens];
}

// The matrix on show: one head of one layer, or the mean over the layer's heads.
function chosenMatrix() {
  const layers = current.maps[$("map").value];
  const heads = layers[Number($("layer").value)];
  if ($("head").value !== AVERAGE) return heads[Number($("head").value)];
  return heads[0].map((row, i) =>
    row.map((_, j) => heads.reduce((sum, head) => sum + head[i][j], 0) / heads.length));
}

function colour(weight) {
  const w = Math.min(1, Math.max(0, weight));
  const shade = (from, to) => Math.round(from + (to - from) * w);
  return `rgb(${shade(247, 8)}, ${shade(251, 48)}, ${shade(255, 107)})`;
}

function svgElement(tag, attributes) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return element;
}

// The colour scale under the map: weight 0 on the left, 1 on the right, the same for every map.
function drawLegend(svg, x, y) {
  const steps = 20;
  for (let k = 0; k < steps; k++) {
    svg.append(svgElement("rect", {
      x: x + (LEGEND_WIDTH / steps) * k, y, width: LEGEND_WIDTH / steps + 0.5, height: 10,
      fill: colour(k / (steps - 1)), class: "legend",
    }));
  }
  for (const [value, at] of [["0", x], ["0.5", x + LEGEND_WIDTH / 2], ["1", x + LEGEND_WIDTH]]) {
    const text = svgElement("text", { x: at, y: y + 24, class: "legend-label" });
    text.textContent = value;
    svg.append(text);
  }
  const title = svgElement("text", { x: x + LEGEND_WIDTH + 12, y: y + 9, class: "legend-title" });
  title.textContent = "attention weight (fixed scale 0 to 1)";
  svg.append(title);
}

function drawHeatmap() {
  const name = $("map").value;
  const [rows, cols] = labels(current, name);
  const matrix = chosenMatrix();
  const left = 12 + CHAR * Math.max(...rows.map((t) => t.length));
  const top = 12 + CHAR * Math.max(...cols.map((t) => t.length));
  const svg = $("heatmap");
  svg.replaceChildren();
  const bottom = top + CELL * rows.length;
  svg.setAttribute("width", Math.max(left + CELL * cols.length, left + LEGEND_WIDTH + 250) + 4);
  svg.setAttribute("height", bottom + 44);
  svg.dataset.rows = rows.length;
  svg.dataset.cols = cols.length;
  cols.forEach((token, j) => {
    const x = left + CELL * j + CELL / 2;
    const text = svgElement("text", {
      x, y: top - 6, class: "col-label", transform: `rotate(-60 ${x} ${top - 6})`,
    });
    text.textContent = token;
    svg.append(text);
  });
  rows.forEach((token, i) => {
    const text = svgElement("text", { x: left - 6, y: top + CELL * i + CELL / 2 + 4, class: "row-label" });
    text.textContent = token;
    svg.append(text);
    cols.forEach((key, j) => {
      const weight = matrix[i][j];
      const cell = svgElement("rect", {
        x: left + CELL * j, y: top + CELL * i, width: CELL - 1, height: CELL - 1,
        fill: colour(weight), class: "cell",
        "data-row": i, "data-col": j, "data-weight": weight.toFixed(5),
      });
      const tip = svgElement("title", {});
      tip.textContent = `${token} → ${key}: ${weight.toFixed(4)}`;
      cell.append(tip);
      cell.addEventListener("mouseenter", () => {
        $("hover").textContent = `row ${i} “${token}” → column ${j} “${key}”: weight ${weight.toFixed(4)}`;
      });
      svg.append(cell);
    });
  });
  drawLegend(svg, left, bottom + 14);
  const head = $("head").value === AVERAGE ? "average of heads" : `head ${Number($("head").value) + 1}`;
  const which = current.description || `${MAP_TITLES[name] || name}, layer ${Number($("layer").value) + 1}, ${head}`;
  $("axes").textContent = `${which}: ` +
    `rows are ${name === "encoder_self" ? "source" : "output"} tokens (queries), ` +
    `columns are ${name === "decoder_self" ? "decoder input" : "source"} tokens (keys).`;
}

// Layer and head choices for the chosen map, keeping the current choice where it still exists.
function refreshChoices() {
  const layers = current.maps[$("map").value];
  fillSelect($("layer"), layers.map((_, l) => [String(l), String(l + 1)]));
  const heads = layers[0].length;
  fillSelect($("head"), [[AVERAGE, "average of heads"], ...layers[0].map((_, h) => [String(h), String(h + 1)])]);
  $("head").disabled = heads === 1;
  drawHeatmap();
}

function showResult(result) {
  $("output").hidden = false;
  $("translation").textContent = result.translation.trim() ? result.translation : "(blank input: nothing to translate)";
  $("warnings").textContent = result.warnings.join("; ");
  const body = $("nbest-list");
  body.replaceChildren();
  result.nbest.forEach((candidate, k) => {
    const row = document.createElement("tr");
    for (const value of [String(k + 1), candidate.text, candidate.score.toFixed(4)]) {
      const cell = document.createElement("td");
      cell.textContent = value;
      row.append(cell);
    }
    body.append(row);
  });
  parts = result.sentences || [result];
  fillSelect($("sentence"), parts.map((part, k) => [String(k), `${k + 1}: ${part.source}`]));
  $("sentence").value = "0";
  $("sentence-choice").hidden = parts.length < 2;
  showSentence();
}

// The attention of the chosen sentence (the only one, unless the text held several).
function showSentence() {
  current = parts[Number($("sentence").value)].attention;
  $("attention").hidden = current === null;
  if (current === null) return;
  const names = Object.keys(current.maps).sort((a, b) => (b === "cross") - (a === "cross")); // cross first
  fillSelect($("map"), names.map((name) => [name, MAP_TITLES[name] || name]));
  refreshChoices();
}

async function translate(event) {
  event.preventDefault();
  const sentence = $("source").value.replace(/\n/g, " ");
  const request = {
    sentences: [sentence],
    beam: Number($("beam").value),
    nbest: Number($("nbest").value),
    attention: true,
    split: $("split").checked,
  };
  if ($("length-penalty").value !== "") request.length_penalty = Number($("length-penalty").value);
  setStatus("translating…", false);
  $("translate").disabled = true;
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    const answer = await response.json();
    if (!response.ok) {
      setStatus(answer.error || `error ${response.status}`, true);
      return;
    }
    showResult(answer.results[0]);
    setStatus(`beam ${answer.beam}, length penalty ${answer.length_penalty}`, false);
  } catch (error) {
    setStatus(`the server did not answer: ${error}`, true);
  } finally {
    $("translate").disabled = false;
  }
}

async function describeModel() {
  try {
    const info = await (await fetch("/info")).json();
    $("beam").value = info.config.decode.beam_size;
    $("model").textContent = `${info.model}, ${info.parameters.toLocaleString("en")} parameters, ` +
      `${info.checkpoint} (step ${info.step}), vocabularies ${info.source_vocab_size} / ` +
      `${info.target_vocab_size} tokens, run by ${info.engine}. Attention: ${info.attention}. ` +
      "API: POST /translate, POST /score, GET /info, GET /health; documentation at /docs.";
  } catch (error) {
    $("model").textContent = `the server did not describe its model: ${error}`;
  }
}

$("form").addEventListener("submit", translate);
$("source").addEventListener("keydown", (event) => { // Enter translates; Shift+Enter is a new line
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("form").requestSubmit();
  }
});
$("sentence").addEventListener("change", showSentence);
$("map").addEventListener("change", refreshChoices);
$("layer").addEventListener("change", drawHeatmap);
$("head").addEventListener("change", drawHeatmap);
describeModel();
