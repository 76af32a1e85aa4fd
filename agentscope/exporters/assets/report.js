// agentscope HTML report: draws the data in #report-data. Data only ever enters the page as
// text (textContent, setAttribute), never as markup: span names come from untrusted programs.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var CLASSES = D.classes, COL = D.colours, COLS = D.task_columns;
  var NS = "http://www.w3.org/2000/svg";
  var I = {}; COLS.forEach(function (c, i) { I[c] = i; });

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function tip(node, text) { node.appendChild(sv("title", {}, text)); return node; }
  function secs(s) {
    if (s === 0) return "0";
    if (s >= 99.5) return s.toFixed(0) + " s";  // the bounds: what rounds up to the next unit
    if (s >= 0.9995) return s.toFixed(2) + " s";
    if (s >= 0.00099995) return (s * 1000).toFixed(1) + " ms";
    return (s * 1e6).toFixed(0) + " µs";
  }
  function pct(x) { return x === 0 ? "0%" : (100 * x).toFixed(1) + "%"; }
  function num(v) {  // three significant digits at most, no trailing zeros
    var a = Math.abs(v);
    return String(+(a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2)));
  }
  function unitOf(s) { return s >= 1 ? [1, " s"] : s >= 1e-3 ? [1e-3, " ms"] : [1e-6, " µs"]; }
  function short(s) {  // a tick's time: three significant digits, no trailing zeros
    var u = unitOf(s);
    return s === 0 ? "0" : String(+(s / u[0]).toPrecision(3)) + u[1];
  }
  function bytes(v) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], k = 0;
    while (Math.abs(v) >= 1024 && k < u.length - 1) { v /= 1024; k++; }
    return num(v) + " " + u[k];
  }
  // a counter's value in its unit (the metric's UCUM unit, agentscope/metric_names.py UNITS)
  function inUnit(v, unit) {
    if (unit === "1") return pct(v);
    if (unit === "By") return bytes(v);
    if (unit === "By/s") return bytes(v) + "/s";
    if (unit === "s") return secs(v);
    var m = /^\{(.+)\}$/.exec(unit || ""), word = m && (m[1] === "cpu" ? "core" : m[1]);
    if (word) return num(v) + " " + (v === 1 ? word : word + (/s$/.test(word) ? "es" : "s"));
    return num(v) + (!unit ? "" : unit.charAt(0) === "/" ? unit : " " + unit);
  }
  // the step of about n ticks over [0, span]: 1, 2 or 5 times a power of ten
  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  // a time axis over [0, total] in one unit, chosen by the span: [[seconds, text]], the first "0"
  function timeTicks(total, n) {
    var step = niceStep(total, n), u = unitOf(total);
    var digits = Math.min(Math.max(0, -Math.floor(Math.log10(step / u[0]) + 1e-9)), 6), out = [];
    for (var k = 0; k * step <= total * (1 + 1e-9); k++) out.push([k * step, k ? (k * step / u[0]).toFixed(digits) + u[1] : "0"]);
    return out;
  }
  // A class that rests on a stage label or an assumption (not on measurement) is drawn
  // hatched: white stripes (this pattern) over its colour, and marked in text.
  var A = D.assumed || {}, MARK = A.mark || "*", HATCH = "as-hatch";
  (function () {
    var defs = sv("svg", { width: 0, height: 0, "aria-hidden": "true", "class": "defs" });
    var d = sv("defs"), p = sv("pattern", { id: HATCH, patternUnits: "userSpaceOnUse", width: 5, height: 5,
                                            patternTransform: "rotate(45)" });
    p.appendChild(sv("rect", { x: 0, y: 0, width: 2.2, height: 5, fill: "#fff", "fill-opacity": "0.75" }));
    d.appendChild(p); defs.appendChild(d); document.body.appendChild(defs);
  })();
  function hatch(x, y, w, h, text) {  // the hatched overlay of an assumed part
    return tip(sv("rect", { x: x, y: y, width: typeof w === "number" ? Math.max(w, 0.5) : w, height: h, fill: "url(#" + HATCH + ")",
                            "class": "assumed" }), text);
  }
  function mark(text, assumed) { return assumed ? text + MARK : text; }
  function legend(withAssumed) {
    var d = el("div", { "class": "legend" });
    CLASSES.forEach(function (c) {
      var s = el("span", {}, c); s.style.setProperty("--c", COL[c]); d.appendChild(s);
    });
    if (withAssumed) d.appendChild(el("span", { "class": "assumed" }, "hatched, " + MARK + ": " + A.legend));
    return d;
  }
  function byClass(list) {  // a task's [share per class] as {class: share}
    var out = {}; CLASSES.forEach(function (c, i) { out[c] = (list || [])[i] || 0; }); return out;
  }
  // values, assumed: {class: seconds or share}; the assumed part of each class drawn hatched,
  // at the end of its class's bar
  // width: pixels, or "100%" (of the container); the bars are laid out in percentages of it
  function stacked(values, width, height, total, assumed) {
    var svg = sv("svg", { width: width, height: height, role: "img" });
    var sum = 0; CLASSES.forEach(function (c) { sum += values[c] || 0; });
    var scale = total || sum || 1, x = 0;
    function at(f, min) {  // a share of the width: pixels (at least min) or a percentage
      return typeof width === "number" ? Math.max(f * width, min || 0) : (100 * f).toFixed(4) + "%";
    }
    CLASSES.forEach(function (c) {
      var v = values[c] || 0; if (v <= 0) return;
      var w = v / scale, a = Math.min((assumed || {})[c] || 0, v);
      svg.appendChild(tip(sv("rect", { x: at(x), y: 0, width: at(w, 0.5), height: height,
                                       fill: COL[c] }), c + ": " + pct(v / (sum || 1)) +
                          (a > 0 ? " (" + pct(a / (sum || 1)) + " " + A.legend + ")" : "")));
      if (a > 0) {
        var wa = a / scale;
        svg.appendChild(hatch(at(x + w - wa), 0, at(wa), height, c + ", " + A.legend + ": " + pct(a / (sum || 1))));
      }
      x += w;
    });
    return svg;
  }

  // ---- header -------------------------------------------------------------------------------
  var S = D.summary;
  document.getElementById("title").textContent = D.title;
  document.getElementById("meta").textContent =
    S.tasks + " tasks, " + S.spans + " spans, " + secs(S.critical_path_s) +
    " on critical paths; orchestration " + pct(S.orchestration_share || 0) + " of it" +
    "; the classes: " + D.basis +
    (D.problem_count ? "; " + D.problem_count + " input problems (the rest was analysed)" : "") +
    ". Generated " + D.generated + "." + (D.partial ? " " + D.partial + "." : "") +
    (D.warning ? " Warning: " + D.warning + "." : "");

  // ---- fleet --------------------------------------------------------------------------------
  function fleet() {
    var f = document.getElementById("fleet");
    f.textContent = "";
    f.appendChild(el("h2", {}, "Where the critical-path time went"));
    f.appendChild(legend(A.any));
    var shares = S.share_of_critical_path || {}, assumed = S.assumed_share_of_critical_path || {};
    var top = el("div", { id: "fleet-share" });
    var bar = stacked(shares, "100%", 26, undefined, assumed); bar.id = "fleet-bar";
    top.appendChild(bar);
    var words = CLASSES.filter(function (c) { return shares[c] > 0; })
      .map(function (c) {
        return mark(c + " " + pct(shares[c]), assumed[c] > 0) +
          (assumed[c] > 0 ? " (" + pct(assumed[c]) + " assumed)" : ""); }).join(" · ");
    top.appendChild(el("div", { "class": "muted" }, words));
    var b = S.bottlenecks || {}, ba = S.assumed_bottlenecks || {};
    top.appendChild(el("div", {}, "Bottleneck of each task: " + (Object.keys(b).map(function (c) {
      var k = ba[c] || 0;
      return b[c] + " " + c + (!k ? "" : k === b[c] ? MARK : " (" + k + MARK + ")"); }).join(", ") || "none")));
    if (A.any) top.appendChild(el("div", { "class": "muted", id: "assumed-legend" }, MARK + " and hatched: " + A.legend + "."));
    f.appendChild(top);
    Object.keys(D.gpu || {}).forEach(function (name) {
      var g = D.gpu[name], w = Object.keys(g.idle_while || {}).slice(0, 4)
        .map(function (k) { return k + " " + pct(g.idle_while[k]); }).join(", ");
      f.appendChild(el("p", { "class": "note" }, "GPU " + name + ": busy " + pct(g.busy) + ", idle " +
        pct(g.idle) + " of " + secs(g.measured_s) + (w ? "; while it was idle the critical paths were in: " + w : "")));
    });
    if ((D.help || []).length) f.appendChild(helpTable());
    // the charts are drawn into their boxes once these are laid out: they take the boxes' width
    var boxes = [el("div"), el("div"), el("div"), el("div", { id: "ranking" })];
    [boxes.slice(0, 2), boxes.slice(2)].forEach(function (two) {
      var grid = el("div", { "class": "grid" }); two.forEach(function (b) { grid.appendChild(b); }); f.appendChild(grid);
    });
    breakdown(boxes[0], "By stage", D.by_stage, D.assumed_by_stage);
    breakdown(boxes[1], "By lane", D.by_lane, D.assumed_by_lane);
    latency(boxes[2]);
    ranking(boxes[3]);
  }
  function helpTable() {  // agentscope whatif's three best changes, a row each
    var help = el("div", { id: "help" }), rows = D.help_rows || [];
    help.appendChild(el("h3", {}, "What would help (predicted from the critical paths)"));
    if (!rows.length) {  // the suggestions were left out: the line says why
      var ul = el("ul", {});
      D.help.forEach(function (line) { ul.appendChild(el("li", {}, line)); });
      help.appendChild(ul);
      return help;
    }
    var tab = el("table", { "class": "help" }), head = el("tr");
    ["change", "mean task latency", "p95 task latency", "throughput"].forEach(function (h) { head.appendChild(el("th", {}, h)); });
    var thead = el("thead"); thead.appendChild(head); tab.appendChild(thead);
    var body = el("tbody");
    function pair(p, f) { return f(p[0]) + " → " + f(p[1]); }
    function s3(v) { return v.toFixed(3) + " s"; }
    rows.forEach(function (r) {
      var tr = el("tr");
      tr.appendChild(el("td", {}, r.change));
      var mean = el("td", { "class": "num" }, pair(r.mean_s, s3) + " ");
      mean.appendChild(el("b", {}, (r.gain > 0 ? "−" : "+") + (100 * Math.abs(r.gain)).toFixed(0) + "%"));
      tr.appendChild(mean);
      tr.appendChild(el("td", { "class": "num" }, pair(r.p95_s, s3)));
      tr.appendChild(el("td", { "class": "num" }, pair(r.throughput_per_h, function (v) { return v.toFixed(0); }) + " tasks/h"));
      body.appendChild(tr);
    });
    tab.appendChild(body); help.appendChild(tab);
    help.appendChild(el("p", { "class": "muted" }, "Each change alone, replayed on the recorded tasks " +
      "(agentscope whatif predicts any other: --speedup stage:tool=2, --cpus, --slots)."));
    return help;
  }
  function breakdown(box, title, rows, assumed) {
    box.appendChild(el("h3", {}, title + " (critical-path seconds per class)"));
    var keys = Object.keys(rows || {}), tot = {}, max = 0;
    keys.forEach(function (k) {
      var t = 0; CLASSES.forEach(function (c) { t += rows[k][c] || 0; }); tot[k] = t; max = Math.max(max, t);
    });
    keys.sort(function (a, b) { return tot[b] - tot[a]; });
    var BW = Math.max(Math.min(box.clientWidth, 900), 400) - 130 - 70;  // the bars' width
    var svg = sv("svg", { width: 130 + BW + 70, height: Math.max(keys.length, 1) * 22 + 4, "class": "breakdown" });
    keys.forEach(function (k, i) {
      var y = i * 22 + 2;
      svg.appendChild(tip(sv("text", { x: 0, y: y + 13 }, k.length > 18 ? k.slice(0, 17) + "…" : k), k));
      var g = stacked(rows[k], BW, 16, max || 1, (assumed || {})[k]); g.setAttribute("x", 130); g.setAttribute("y", y);
      svg.appendChild(g);
      svg.appendChild(sv("text", { x: 130 + (tot[k] / (max || 1)) * BW + 6, y: y + 13, "class": "muted" }, secs(tot[k])));
    });
    box.appendChild(svg);
  }
  function latency(box) {
    box.appendChild(el("h3", {}, "Task latency by bottleneck class"));
    var durs = D.tasks.map(function (t) { return Math.max(t[I.duration_s], 1e-6); });
    if (!durs.length) { box.appendChild(el("p", { "class": "muted" }, "no tasks")); return; }
    var lo = Math.log10(Math.min.apply(null, durs)), hi = Math.log10(Math.max.apply(null, durs));
    if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
    var bins = 30, x0 = 100, W = Math.max(Math.min(box.clientWidth, 900), 400) - x0 - 20, H = 34;
    var present = CLASSES.filter(function (c) { return D.tasks.some(function (t) { return t[I.bottleneck] === c; }); });
    var rowsH = present.length * (H + 8), svg = sv("svg", { width: x0 + W + 20, height: rowsH + 36, "class": "latency" });
    function X(v) { return x0 + (v - lo) / (hi - lo) * W; }
    // the axis: ticks at 1, 2 and 5 times a power of ten (decades only when that is too many)
    var ticks = [];
    for (var e = Math.floor(lo); e <= Math.ceil(hi); e++) [1, 2, 5].forEach(function (m) {
      var v = e + Math.log10(m); if (v >= lo - 1e-9 && v <= hi + 1e-9) ticks.push(v);
    });
    if (ticks.length > 8) ticks = ticks.filter(function (v) { return Math.abs(v - Math.round(v)) < 1e-9; });
    if (ticks.length < 2) ticks = [lo, hi];
    var axis = sv("g", { "class": "axis" });
    ticks.forEach(function (v) {
      var x = X(v);
      axis.appendChild(sv("line", { x1: x, x2: x, y1: 0, y2: rowsH }));
      axis.appendChild(sv("text", { x: x, y: rowsH + 12, "text-anchor": x < x0 + 15 ? "start" : x > x0 + W - 15 ? "end" : "middle",
                                    "class": "muted" }, short(Math.pow(10, v))));
    });
    axis.appendChild(sv("text", { x: x0 + W / 2, y: rowsH + 30, "text-anchor": "middle", "class": "muted axis-title" },
                        "task duration (log scale)"));
    svg.appendChild(axis);
    present.forEach(function (c, r) {
      var counts = new Array(bins).fill(0), n = 0;
      D.tasks.forEach(function (t) {
        if (t[I.bottleneck] !== c) return;
        var b = Math.min(bins - 1, Math.floor((Math.log10(Math.max(t[I.duration_s], 1e-6)) - lo) / (hi - lo) * bins));
        counts[b]++; n++;
      });
      var m = Math.max.apply(null, counts), y = r * (H + 8), k = (S.assumed_bottlenecks || {})[c] || 0;
      svg.appendChild(sv("text", { x: 0, y: y + H - 4 }, c + " (" + n + (k ? ", " + k + MARK : "") + ")"));
      svg.appendChild(sv("line", { x1: x0, x2: x0 + W, y1: y + H + 0.5, y2: y + H + 0.5, stroke: "#c9ced9" }));
      counts.forEach(function (k, i) {
        if (!k) return;
        var h = Math.max(k / m * H, 1);
        svg.appendChild(tip(sv("rect", { x: x0 + i * W / bins, y: y + H - h, width: W / bins - 1, height: h, fill: COL[c] }),
          k + " tasks, " + secs(Math.pow(10, lo + i * (hi - lo) / bins)) + "–" + secs(Math.pow(10, lo + (i + 1) * (hi - lo) / bins))));
      });
    });
    box.appendChild(svg);
  }
  function ranking(box) {
    box.appendChild(el("h3", {}, "Tasks that lost the most time to each class"));
    CLASSES.forEach(function (c, ci) {
      var lost = D.tasks.map(function (t, i) { return [t[I.shares][ci] * t[I.duration_s], i]; })
        .filter(function (p) { return p[0] > 0; }).sort(function (a, b) { return b[0] - a[0]; }).slice(0, 5);
      if (!lost.length) return;
      var p = el("div", {}); var h = el("span", { "class": "cls" }, c + ": "); h.style.color = COL[c]; p.appendChild(h);
      lost.forEach(function (l, k) {
        if (k) p.appendChild(document.createTextNode(", "));
        p.appendChild(taskLink(l[1], D.tasks[l[1]][I.name]));
        var t = D.tasks[l[1]], a = (t[I.assumed_shares] || [])[ci] || 0;
        p.appendChild(document.createTextNode(" " + mark(secs(l[0]), a > 0.5 * t[I.shares][ci])));
      });
      box.appendChild(p);
    });
    return box;
  }
  function taskLink(i, text) {
    var a = el("a", { href: "#task=" + i }, text);
    if (!D.timelines[String(i)]) a.setAttribute("title", "no timeline in this report (see --timelines): its evidence only");
    return a;
  }

  // ---- task table ---------------------------------------------------------------------------
  // Sorting and filtering work on the data; only the first PAGE matching rows are in the page
  // ("show more" adds the next): a table of 10k tasks laid out whole takes seconds.
  var PAGE = 200, order = [], matching = [], limit = PAGE, sortKey = I.duration_s, sortDir = -1;
  var tbody, countEl, moreEl, qEl, clsEl, texts = [];
  function table() {
    var t = document.getElementById("table");
    t.appendChild(el("h2", {}, "Tasks"));
    var ctl = el("div", { "class": "controls" });
    qEl = el("input", { id: "filter", type: "search", placeholder: "filter: name, lane, class or evidence" });
    clsEl = el("select", { id: "class-filter" });
    clsEl.appendChild(el("option", { value: "" }, "every bottleneck"));
    CLASSES.forEach(function (c) { clsEl.appendChild(el("option", { value: c }, c)); });
    countEl = el("span", { id: "shown", "class": "muted" });
    ctl.appendChild(qEl); ctl.appendChild(clsEl); ctl.appendChild(countEl);
    t.appendChild(ctl);
    var wrap = el("div", { "class": "tablewrap" }), tab = el("table", { id: "tasks" });
    var head = el("tr");
    [["task", I.name], ["lane", I.lane], ["start", I.start], ["duration", I.duration_s],
     ["bottleneck", I.bottleneck], ["conf.", I.confidence], ["shares", null], ["main evidence", I.evidence]]
      .forEach(function (h) {
        var th = el("th", {}, h[0]);
        if (h[1] !== null) {
          th.dataset.key = h[1];
          th.addEventListener("click", function () { sortBy(h[1], th); });
        }
        head.appendChild(th);
      });
    var thead = el("thead"); thead.appendChild(head); tab.appendChild(thead);
    tbody = el("tbody"); tab.appendChild(tbody);
    wrap.appendChild(tab); t.appendChild(wrap);
    moreEl = el("button", { id: "more", type: "button" });
    moreEl.addEventListener("click", function () { limit += PAGE; draw(); });
    t.appendChild(moreEl);
    D.tasks.forEach(function (task, i) {
      order.push(i);
      texts.push((task[I.name] + " " + task[I.lane] + " " + task[I.bottleneck] + " " + task[I.evidence]).toLowerCase());
    });
    qEl.addEventListener("input", function () { setHash({ q: qEl.value }); });
    clsEl.addEventListener("change", function () { setHash({ "class": clsEl.value }); });
    sortBy(I.duration_s, head.children[3], -1, true);
  }
  function row(i) {
    var task = D.tasks[i], tr = el("tr", { "data-task": i });
    var name = el("td", { "class": "name" }), link = taskLink(i, task[I.name]);
    if (!link.title) link.title = task[I.name];
    name.appendChild(link);
    tr.appendChild(name);
    tr.appendChild(el("td", {}, task[I.lane] || "-"));
    tr.appendChild(el("td", { "class": "num" }, task[I.start].replace("T", " ").replace("Z", "")));
    tr.appendChild(el("td", { "class": "num" }, secs(task[I.duration_s])));
    var b = el("td", { "class": "cls" }, mark(task[I.bottleneck], task[I.bottleneck_assumed]));
    b.style.color = COL[task[I.bottleneck]] || "";
    if (task[I.bottleneck_assumed]) { b.classList.add("assumed"); b.title = A.legend; }
    tr.appendChild(b);
    tr.appendChild(el("td", { "class": "num" }, task[I.confidence].toFixed(2)));
    var sh = el("td"), bar = stacked(byClass(task[I.shares]), 120, 12, 1, byClass(task[I.assumed_shares]));
    bar.setAttribute("class", "minibar");
    sh.appendChild(bar); tr.appendChild(sh);
    // one line: the evidence of the span that held the task longest; the rest (the next spans)
    // folded under it, the line itself whole when unfolded
    var ev = el("td", { "class": "ev" }), more = task[I.more_evidence] || [];
    var first = el("span", { "class": "ev1", title: task[I.evidence] }, task[I.evidence]);
    if (more.length) {
      var det = el("details"), sum = el("summary"), ul = el("ul");
      sum.appendChild(first); sum.appendChild(el("span", { "class": "evmore" }, "+" + more.length + " more"));
      det.appendChild(sum);
      more.forEach(function (e) { ul.appendChild(el("li", {}, e)); });
      det.appendChild(ul); ev.appendChild(det);
    } else {
      var line = el("div", { "class": "evline" }); line.appendChild(first); ev.appendChild(line);
    }
    tr.appendChild(ev);
    return tr;
  }
  function sortBy(key, th, dir, quiet) {
    sortDir = dir || (sortKey === key ? -sortDir : (key === I.name || key === I.lane || key === I.bottleneck ? 1 : -1));
    sortKey = key;
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("data-sort"); });
    th.setAttribute("data-sort", sortDir > 0 ? "asc" : "desc");
    order.sort(function (a, b) {
      var x = D.tasks[a][key], y = D.tasks[b][key];
      return (x < y ? -1 : x > y ? 1 : a - b) * sortDir;
    });
    if (!quiet) filter(qEl.value, clsEl.value);
  }
  function filter(q, cls) {
    q = (q || "").toLowerCase();
    matching = order.filter(function (i) {
      return (!q || texts[i].indexOf(q) >= 0) && (!cls || D.tasks[i][I.bottleneck] === cls);
    });
    limit = PAGE;
    draw();
  }
  function draw() {
    var frag = document.createDocumentFragment(), n = Math.min(limit, matching.length);
    for (var k = 0; k < n; k++) frag.appendChild(row(matching[k]));
    tbody.textContent = "";
    tbody.appendChild(frag);
    countEl.textContent = matching.length + " of " + D.tasks.length + " tasks" +
      (n < matching.length ? " (showing " + n + ")" : "");
    countEl.dataset.shown = matching.length;
    moreEl.textContent = "show " + Math.min(PAGE, matching.length - n) + " more";
    moreEl.hidden = n >= matching.length;
  }

  // ---- timeline -----------------------------------------------------------------------------
  function timeline(i) {
    var box = document.getElementById("timeline");
    box.textContent = "";
    var tl = D.timelines[String(i)], task = D.tasks[i];
    if (task === undefined) return;
    box.appendChild(el("h2", {}, "Task: " + task[I.name]));
    var meta = (task[I.lane] || "no lane") + " · " + task[I.start] + " · " + secs(task[I.duration_s]) +
      " · bottleneck " + mark(task[I.bottleneck], task[I.bottleneck_assumed]) +
      (task[I.bottleneck_assumed] ? " (" + A.legend + ")" : "") +
      " (confidence " + task[I.confidence].toFixed(2) + ")" +
      (tl && tl.host ? " · host " + tl.host : "") + " · trace " + task[I.trace_id];
    box.appendChild(el("p", { "class": "muted" }, meta));
    if (!tl) {
      box.appendChild(el("p", { "class": "note" }, "This report has no timeline for this task: it keeps " +
        D.timelines_limit + " (the slowest and the most typical). Make one with a larger --timelines."));
      box.appendChild(el("h3", {}, "Evidence"));
      var list = el("ul", { "class": "evidence" });
      [task[I.evidence]].concat(task[I.more_evidence] || []).forEach(function (e) { if (e) list.appendChild(el("li", {}, e)); });
      box.appendChild(list);
      return;
    }
    box.appendChild(legend(tl.path.some(function (p) { return p[8]; })));
    var total = Math.max(task[I.duration_s], 1e-9), LW = 240, RW = 80;  // the counters' scale right of the plot
    var W = Math.max(Math.min(box.clientWidth - LW - RW, 1100), 360);
    var RH = 16, MAXROWS = 1500;
    var order = spanOrder(tl.spans).slice(0, MAXROWS);
    var rowOf = {}; order.forEach(function (s, r) { rowOf[s] = r; });
    var counters = tl.counters || [], CH = 40;
    var top = 22, pathY = top, spansY = top + RH + 10;
    var height = spansY + order.length * RH + 10 + counters.length * (CH + 10) + 20;
    var svg = sv("svg", { width: LW + W + RW, height: height, id: "gantt", role: "img" });
    function X(t) { return LW + Math.max(0, Math.min(t / total, 1)) * W; }
    var axis = sv("g", { "class": "axis" });
    timeTicks(total, Math.max(Math.round(W / 110), 2)).forEach(function (tk) {
      var x = X(tk[0]);
      axis.appendChild(sv("line", { x1: x, x2: x, y1: 14, y2: height - 4 }));
      axis.appendChild(sv("text", { x: x, y: 11, "text-anchor": x > LW + W - 25 ? "end" : "middle", "class": "muted tick" }, tk[1]));
    });
    svg.appendChild(axis);
    svg.appendChild(sv("text", { x: 0, y: pathY + 12 }, "critical path"));
    tl.path.forEach(function (p) {
      var what = p[4] + " [" + p[5] + "] " + mark(p[2], p[8]) + ", " + secs(p[1] - p[0]) + ": " + p[6];
      svg.appendChild(tip(sv("rect", { x: X(p[0]), y: pathY, width: Math.max(X(p[1]) - X(p[0]), 0.7), height: RH - 2, fill: COL[p[2]] }), what));
      if (p[8]) svg.appendChild(hatch(X(p[0]), pathY, Math.max(X(p[1]) - X(p[0]), 0.7), RH - 2, A.legend + ": " + what));
    });
    order.forEach(function (s, r) {
      var span = tl.spans[s], y = spansY + r * RH, depth = depthOf(tl.spans, s);
      var label = "\u00a0".repeat(Math.min(depth, 12) * 2) + span[2];
      svg.appendChild(tip(sv("text", { x: 0, y: y + 11 }, label.length > 38 ? label.slice(0, 37) + "…" : label),
        span[2] + (span[3] ? " [" + span[3] + "]" : "")));
      svg.appendChild(tip(sv("rect", { x: X(span[4]), y: y + 3, width: Math.max(X(span[5]) - X(span[4]), 0.7), height: RH - 6, fill: "#c9ced9" }),
        span[2] + " [" + (span[3] || "no stage") + "] " + secs(span[5] - span[4])));
    });
    tl.path.forEach(function (p) {  // the critical path over its spans' rows
      var r = rowOf[p[3]]; if (r === undefined) return;
      svg.appendChild(tip(sv("rect", { x: X(p[0]), y: spansY + r * RH + 1, width: Math.max(X(p[1]) - X(p[0]), 0.7), height: RH - 2,
                                       fill: COL[p[2]], "class": "cp" }), mark(p[2], p[8]) + ": " + p[6]));
      if (p[8]) svg.appendChild(hatch(X(p[0]), spansY + r * RH + 1, Math.max(X(p[1]) - X(p[0]), 0.7), RH - 2,
                                      A.legend + ": " + p[2] + ": " + p[6]));
    });
    var cy = spansY + order.length * RH + 14;
    counters.forEach(function (c) { lane(svg, c, cy, CH, LW, W, X, total); cy += CH + 10; });
    box.appendChild(svg);
    if (!counters.length) box.appendChild(el("p", { "class": "muted" }, "No host counters were recorded during this task " +
      "(record them with `agentscope run` or agentscope.init(collect=True))."));
    if (order.length < tl.spans.length) box.appendChild(el("p", { "class": "muted" }, "showing the first " + MAXROWS + " of " + tl.spans.length + " spans"));
    box.appendChild(el("h3", {}, "Evidence"));
    var ul = el("ul", { "class": "evidence" });
    (tl.evidence || []).forEach(function (e) { ul.appendChild(el("li", {}, e)); });
    box.appendChild(ul);
    // every section, in time order; those under 1% of the task folded under the rest
    box.appendChild(el("h3", {}, "Each critical-path section"));
    var ol = el("ol", { "class": "evidence", id: "sections" }), floor = 0.01 * total;
    var long = tl.path.filter(function (p) { return p[1] - p[0] >= floor; });
    var brief = tl.path.filter(function (p) { return p[1] - p[0] < floor; });
    if (!long.length) { long = tl.path; brief = []; }
    long.forEach(function (p) { ol.appendChild(section(p)); });
    box.appendChild(ol);
    if (brief.length) {
      var det = el("details", { id: "short-sections" }), rest = el("ol", { "class": "evidence" }), sum = 0;
      brief.forEach(function (p) { rest.appendChild(section(p)); sum += p[1] - p[0]; });
      det.appendChild(el("summary", { "class": "muted" }, brief.length + " shorter section" + (brief.length > 1 ? "s" : "") +
        " (each under 1% of the task, " + secs(sum) + " in all)"));
      det.appendChild(rest); box.appendChild(det);
    }
  }
  function section(p) {  // a critical-path section in words
    var li = el("li"), w = el("span", { "class": "when" }, secs(p[0]) + "–" + secs(p[1]) + " ");
    var c = el("span", { "class": "cls" + (p[8] ? " assumed" : "") }, mark(p[2], p[8])); c.style.color = COL[p[2]];
    if (p[8]) c.title = A.legend;
    li.appendChild(w); li.appendChild(c);
    if (p[8]) li.appendChild(el("span", { "class": "muted" }, " (" + A.legend + ")"));
    li.appendChild(document.createTextNode(" " + p[4] + (p[5] ? " [" + p[5] + "]" : "") + ": " + p[6]));
    return li;
  }
  // a counter's lane under the timeline: its name, mean and peak over the task, in its unit;
  // a step line (each value holds until the next sample); its scale right of the plot
  function lane(svg, c, cy, CH, LW, W, X, total) {
    var pts = c.points, unit = c.unit || (c.scale === "share" ? "1" : ""), peak = 0, area = 0;
    pts.forEach(function (q, j) {
      var a = Math.max(q[0], 0), b = Math.min(j + 1 < pts.length ? pts[j + 1][0] : total, total);
      if (b > a) area += q[1] * (b - a);
      if (b > a || j === pts.length - 1) peak = Math.max(peak, q[1]);
    });
    var max = c.scale === "share" ? 1 : peak > 0 ? niceStep(peak, 1) : 1;
    if (max < peak) max *= 2;
    var stats = "mean " + inUnit(area / total, unit) + " · peak " + inUnit(peak, unit);
    var name = c.label.length > 38 ? c.label.slice(0, 37) + "…" : c.label;
    svg.appendChild(tip(sv("text", { x: 0, y: cy + 15, "class": "lane" }, name), c.label + " (" + c.metric + ")"));
    svg.appendChild(sv("text", { x: 0, y: cy + 30, "class": "muted lane-stats" }, stats));
    svg.appendChild(tip(sv("rect", { x: LW, y: cy, width: W, height: CH, fill: "#f6f7fa" }),
                        c.label + " over the task: " + stats));
    svg.appendChild(sv("text", { x: LW + W + 6, y: cy + 9, "class": "muted scale" },
                       unit === "1" ? (100 * max).toFixed(0) + "%" : inUnit(max, unit)));
    svg.appendChild(sv("text", { x: LW + W + 6, y: cy + CH, "class": "muted scale" }, "0"));
    var d = "";
    pts.forEach(function (q, j) {
      var x = X(q[0]), y = cy + CH - Math.max(0, Math.min(q[1] / max, 1)) * CH;
      d += (j ? "H" + x.toFixed(1) + "V" + y.toFixed(1) : "M" + x.toFixed(1) + "," + y.toFixed(1));
    });
    if (pts.length) {
      d += "H" + X(total).toFixed(1);
      svg.appendChild(sv("path", { d: d, fill: "none", stroke: "#39415a", "stroke-width": 1.2 }));
    }
  }
  function spanOrder(spans) {  // depth first, children by start time
    var kids = {}, roots = [];
    spans.forEach(function (s, i) { if (s[1] >= 0) (kids[s[1]] = kids[s[1]] || []).push(i); else roots.push(i); });
    var out = [], stack = roots.slice().reverse();
    while (stack.length) {
      var i = stack.pop(); out.push(i);
      var k = kids[i] || []; for (var j = k.length - 1; j >= 0; j--) stack.push(k[j]);
    }
    return out;
  }
  function depthOf(spans, i) { var d = 0; while (spans[i][1] >= 0 && d < 64) { i = spans[i][1]; d++; } return d; }

  // ---- the address: #task=N&q=text&class=cpu ------------------------------------------------
  function readHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return; var p = kv.split("="); out[decodeURIComponent(p[0])] = decodeURIComponent(p.slice(1).join("=") || "");
    });
    return out;
  }
  function setHash(change) {
    var h = readHash(); for (var k in change) { if (change[k] === "" || change[k] === null) delete h[k]; else h[k] = change[k]; }
    var s = Object.keys(h).map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(h[k]); }).join("&");
    history.replaceState(null, "", s ? "#" + s : location.pathname + location.search);
    apply();
  }
  var shownTask = null;
  // navigate: the address was opened or changed from outside (a link), not by typing a filter
  function apply(navigate) {
    var h = readHash();
    if (qEl.value !== (h.q || "")) qEl.value = h.q || "";
    if (clsEl.value !== (h["class"] || "")) clsEl.value = h["class"] || "";
    // the timeline before the table's rows: it reads its box's width, which lays out the page
    // (quick while the table is empty)
    var first = D.typical[Object.keys(D.typical)[0]], scroll = false;
    var want = h.task !== undefined ? parseInt(h.task, 10) : (first !== undefined ? first : 0);
    if (want !== shownTask && D.tasks.length) {
      shownTask = want; timeline(want); scroll = h.task !== undefined;
    }
    filter(h.q, h["class"]);
    if (scroll) document.getElementById("timeline").scrollIntoView();
    if (navigate && h.task === undefined && (h.q || h["class"] || h.table !== undefined)) {
      document.getElementById("table").scrollIntoView();  // a link to a filtered table shows it
    }
  }

  fleet();
  table();
  window.addEventListener("hashchange", function () { apply(true); });
  // the charts take the width of the window they were drawn in: redrawn when it changes
  var drawnWidth = window.innerWidth, redraw = null;
  window.addEventListener("resize", function () {
    if (window.innerWidth === drawnWidth) return;
    clearTimeout(redraw);
    redraw = setTimeout(function () {
      drawnWidth = window.innerWidth; fleet();
      if (shownTask !== null) timeline(shownTask);
    }, 150);
  });
  apply(true);
  document.body.setAttribute("data-rendered-ms", Math.round(performance.now()));
  // after the browser has laid out and painted what was drawn: the time to a usable page
  requestAnimationFrame(function () {
    setTimeout(function () { document.body.setAttribute("data-painted-ms", Math.round(performance.now())); }, 0);
  });
})();
