"""An interactive attention viewer in one self-contained HTML file (no network, no server), after
bertviz's "head view": pick a kind of attention, a layer and a head; hover a token on the left and lines
go to the tokens it attends to on the right, as thick and dark as the weight.

Text is data, never markup: the tokens and weights travel as JSON inside a
``<script type="application/json">`` element (every ``<``, ``>`` and ``&`` escaped as ``\\u003c`` ...,
so no token can close the element), and the page puts tokens on screen with ``textContent`` only.
A token such as ``<script>alert(1)</script>`` shows as those characters and runs nothing.

Shapes: H heads, T queries, S keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from aiayn.io import write_text

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>attention</title>
<style>
 body { font: 14px sans-serif; margin: 1.5em; }
 #view { display: flex; gap: 0; align-items: flex-start; }
 .col { display: flex; flex-direction: column; }
 .tok { padding: 2px 6px; height: 20px; line-height: 20px; cursor: default; white-space: pre; }
 .col.q .tok { text-align: right; }
 .tok.on { background: #ffe08a; }
 svg line { stroke: #1f5fbf; }
 select { margin-right: 1em; }
</style></head>
<body>
<h3 id="title"></h3>
<p><label>attention <select id="kind"></select></label>
   <label>layer <select id="layer"></select></label>
   <label>head <select id="head"></select></label>
   <span id="hint">hover a token on the left</span></p>
<div id="view"><div class="col q" id="queries"></div><svg id="lines" width="160"></svg>
<div class="col k" id="keys"></div></div>
<script type="application/json" id="aiayn-data">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("aiayn-data").textContent);
const $ = (id) => document.getElementById(id);
$("title").textContent = data.title;
function options(select, labels) {
  select.replaceChildren();
  labels.forEach((label, i) => { const o = document.createElement("option"); o.value = i; o.textContent = label;
                                 select.appendChild(o); });
}
options($("kind"), data.kinds.map((k) => k.name));
function current() { return data.kinds[+$("kind").value]; }
function weights() { return current().weights[+$("layer").value][+$("head").value]; }  // (T, S)
function tokens(box, list, side) {
  box.replaceChildren();
  list.forEach((t, i) => { const d = document.createElement("div"); d.className = "tok"; d.textContent = t;
                           d.dataset.index = i; d.dataset.side = side; box.appendChild(d); });
}
function clear() {
  $("lines").replaceChildren();
  document.querySelectorAll(".tok.on").forEach((d) => d.classList.remove("on"));
  document.querySelectorAll(".col.k .tok").forEach((d) => { delete d.dataset.weight; });
}
function show(i) {
  clear();
  const row = weights()[i], svg = $("lines"), top = svg.getBoundingClientRect().top;
  const q = $("queries").children[i], keys = $("keys").children;
  q.classList.add("on");
  const y = (el) => el.getBoundingClientRect().top + el.offsetHeight / 2 - top;
  row.forEach((w, j) => {
    keys[j].dataset.weight = w.toFixed(6);
    if (w < 0.01) return;
    const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
    line.setAttribute("x1", 0); line.setAttribute("y1", y(q)); line.setAttribute("x2", 160);
    line.setAttribute("y2", y(keys[j])); line.setAttribute("stroke-width", 1 + 5 * w);
    line.setAttribute("stroke-opacity", Math.min(1, 0.15 + w)); svg.appendChild(line);
  });
}
function draw() {
  const k = current();
  tokens($("queries"), k.queries, "q"); tokens($("keys"), k.keys, "k");
  $("lines").setAttribute("height", 24 * Math.max(k.queries.length, k.keys.length));
  document.querySelectorAll(".col.q .tok").forEach((d) =>
    d.addEventListener("mouseenter", () => show(+d.dataset.index)));
  clear();
}
function pick() {
  const k = current();
  const layer = Math.min(+$("layer").value || 0, k.weights.length - 1);
  options($("layer"), k.weights.map((_, i) => String(i))); $("layer").value = layer;
  options($("head"), k.weights[0].map((_, i) => String(i)));
  draw();
}
$("kind").addEventListener("change", pick);
$("layer").addEventListener("change", draw);
$("head").addEventListener("change", draw);
pick();
// A view named in the address, e.g. view.html#kind=2&layer=0&head=1&hover=3, is opened as if picked and
// hovered by hand (for links to one head, and for the browser test); else the page's own (data.view), if any.
const hash = new URLSearchParams(location.hash.slice(1)), start = data.view || {};
const want = (key) => hash.has(key) ? hash.get(key) : (key in start ? String(start[key]) : null);
if (want("kind") !== null) { $("kind").value = want("kind"); pick(); }
if (want("layer") !== null) { $("layer").value = want("layer"); draw(); }
if (want("head") !== null) { $("head").value = want("head"); draw(); }
if (want("hover") !== null) {
  const tok = $("queries").children[+want("hover")];
  if (tok) tok.dispatchEvent(new MouseEvent("mouseenter"));
}
</script></body></html>
"""


def _escape(text: str) -> str:
    """JSON that is safe inside a <script> element: nothing in it can end the element or open a comment."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def attention_html(
    kinds: Mapping[str, Sequence[Tensor]],
    tokens: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    path: str | os.PathLike,
    title: str = "",
    view: Mapping[str, int] | None = None,
) -> Path:
    """Write the viewer for ``kinds`` of attention to ``path``.

    Args:
        kinds: ``{name: [(H, T, S) weights per layer]}`` (as :func:`aiayn.viz.attention_weights` returns).
        tokens: ``{name: (queries, keys)}``, T and S token strings for each kind.
        path: the HTML file, written atomically.
        title: shown above the view.
        view: what the page opens at, by index: ``{"kind", "layer", "head", "hover"}`` (any of them; ``hover``
            a query token, whose lines are drawn). A ``#kind=..&hover=..`` in the address takes precedence.

    Returns:
        ``path``.

    Raises:
        ValueError: weights that do not fit their tokens; a ``view`` key or index that is not one of the page's.
    """
    data: dict[str, Any] = {"title": title, "kinds": []}
    for name, layers in kinds.items():
        queries, keys = tokens[name]
        for i, w in enumerate(layers):
            if w.dim() != 3 or w.shape[1:] != (len(queries), len(keys)):
                raise ValueError(f"{name} layer {i}: weights {tuple(w.shape)} must be (heads, {len(queries)} "
                                 f"queries, {len(keys)} keys)")
        data["kinds"].append({"name": name, "queries": list(queries), "keys": list(keys),
                              "weights": [[[[round(float(x), 6) for x in row] for row in head] for head in w]
                                          for w in layers]})
    if not data["kinds"]:
        raise ValueError("kinds is empty: no attention to show")
    if view:
        data["view"] = _checked_view(view, data["kinds"])
    page = _PAGE.replace("__DATA__", _escape(json.dumps(data, ensure_ascii=False)))
    return write_text(path, page)


def _checked_view(view: Mapping[str, int], kinds: list[dict[str, Any]]) -> dict[str, int]:
    """``view`` as plain ints, each index within the page's kinds, layers, heads and queries."""
    unknown = set(view) - {"kind", "layer", "head", "hover"}
    if unknown:
        raise ValueError(f"view has unknown keys {sorted(unknown)}; expected kind, layer, head, hover")
    kind = kinds[int(view.get("kind", 0))] if 0 <= int(view.get("kind", 0)) < len(kinds) else None
    if kind is None:
        raise ValueError(f"view kind={view['kind']} must be in [0, {len(kinds)})")
    sizes = {"layer": len(kind["weights"]), "head": len(kind["weights"][0]), "hover": len(kind["queries"])}
    for key, n in sizes.items():
        if key in view and not 0 <= int(view[key]) < n:
            raise ValueError(f"view {key}={view[key]} must be in [0, {n}) for {kind['name']}")
    return {k: int(v) for k, v in view.items()}


__all__ = ["attention_html"]
