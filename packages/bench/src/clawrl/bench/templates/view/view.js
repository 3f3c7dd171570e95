// clawrl viewer: an index of the run and, on demand, one rollout (or group) at a time.
// Data files data/<key>.js call window.__clawrl_load(key, data); load() inserts their
// <script> tag (a file:// page may not fetch JSON files, but it may load scripts).
(function () {
  "use strict";
  var INDEX = window.CLAWRL_INDEX || { rollouts: [], groups: [], steps: [], metrics: [] };
  var cache = {}, waiting = {};

  window.__clawrl_load = function (key, data) {
    cache[key] = data;
    (waiting[key] || []).forEach(function (cb) { cb(data); });
    delete waiting[key];
  };

  function load(key, cb) {
    if (cache[key]) { cb(cache[key]); return; }
    if (waiting[key]) { waiting[key].push(cb); return; }
    waiting[key] = [cb];
    var s = document.createElement("script");
    s.src = "data/" + key + ".js";
    s.onerror = function () { status("could not load data/" + key + ".js"); };
    document.head.appendChild(s);
  }

  function $(id) { return document.getElementById(id); }
  function status(t) { $("status").textContent = t || ""; }
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "html") e.innerHTML = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (kids || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function fmt(x, d) { return x == null ? "–" : (typeof x === "number" ? x.toFixed(d == null ? 3 : d) : String(x)); }
  function row(cells, th) { return el("tr", {}, cells.map(function (c) { return el(th ? "th" : "td", {}, [c]); })); }
  function link(text, hash) { return el("a", { href: hash, text: text }); }

  // ------------------------------------------------------------------ index
  function renderIndex(filterStep) {
    $("runname").textContent = INDEX.kind + " run " + INDEX.run;
    $("run-info").textContent = "model: " + INDEX.model + " · " + INDEX.rollouts.length +
      " rollouts · generated " + INDEX.generated;
    $("curves-box").hidden = !INDEX.metrics.length;
    var steps = $("steps");
    steps.innerHTML = "";
    if (INDEX.steps.length) {
      var t = el("table", { "class": "grid" });
      t.appendChild(row(["step", "reward", "pass rate", "tree compression", "rollouts"], true));
      INDEX.steps.forEach(function (s) {
        var m = INDEX.metrics.filter(function (r) { return r.step === s; })[0] || {};
        var n = INDEX.rollouts.filter(function (r) { return r.step === s; }).length;
        t.appendChild(row([link("step " + s, "#step=" + s), fmt(m.reward_mean), fmt(m.pass_rate),
          fmt(m.tree_compression, 2), link(n + " rollouts", "#step=" + s)]));
      });
      steps.appendChild(t);
    }
    $("filter").textContent = filterStep != null ? "rollouts of step " + filterStep + " " : "";
    if (filterStep != null) $("filter").appendChild(link("(all)", "#"));
    var tab = $("rollouts");
    tab.innerHTML = "";
    tab.appendChild(row(["rollout", "phase", "step", "task", "harness", "sample", "status", "reward",
      "calls", "diverged", "leaves", "flags"], true));
    INDEX.rollouts.forEach(function (r) {
      if (filterStep != null && r.step !== filterStep) return;
      var tr = row([link(r.id, "#r=" + r.key), r.phase, fmt(r.step, 0), r.task_id, r.harness,
        String(r.sample_index), r.status, fmt(r.reward, 2), String(r.n_calls), String(r.n_diverged),
        String(r.n_leaves), r.flags.join(", ")]);
      tr.setAttribute("data-key", r.key);
      tab.appendChild(tr);
    });
    var g = $("groups");
    g.innerHTML = "";
    $("groups-box").hidden = !INDEX.groups.length;
    g.appendChild(row(["group", "rollouts", "leaves"], true));
    INDEX.groups.forEach(function (x) { g.appendChild(row([link(x.group_id, "#g=" + x.key), String(x.n), String(x.n_leaves)])); });
  }

  // ------------------------------------------------------------------ tokens
  function tokSpan(vocab, id, cls) {
    var t = vocab[String(id)];
    return el("span", { "class": "tok " + (cls || ""), title: "id " + id, text: t == null ? "⟨" + id + "⟩" : t });
  }

  function tokenDiff(d, vocab) {
    var box = el("div", { "class": "tokdiff" });
    [["left", "del", "parent"], ["right", "ins", "this call"]].forEach(function (s) {
      var side = el("div", { "class": "side " + s[0] }, [el("div", { "class": "legend", text: s[2] + " · tokens " + d.start + "…" })]);
      d[s[0]].forEach(function (id, i) { side.appendChild(tokSpan(vocab, id, d.start + i < d.at ? "ctx" : s[1])); });
      box.appendChild(side);
    });
    return box;
  }

  function relationBox(c, vocab) {
    var r = c.relation || {}, kids = [];
    var text = "prompt_relation: " + (r.kind || "?");
    if (r.parent_call_id) text += " · parent #" + fmt(r.parent_seq, 0) + " (" + r.parent_call_id + ")";
    kids.push(el("div", { text: text }));
    if (r.kind === "spliced") {
      (r.spliced || []).forEach(function (s) {
        kids.push(el("div", { "class": "mono", text: "message " + s.message_index + " (an echoed assistant turn) → exact ids of call #" + fmt(s.seq, 0) + " " + s.call_id }));
        kids.push(el("div", { "class": "tokdiff spliced" }, [
          el("pre", { text: "as the harness echoed it:\n" + (s.echoed == null ? "(not shown for this API)" : s.echoed) }),
          el("pre", { text: "what the model generated (spliced in):\n" + s.generated })]));
      });
    }
    if (r.kind === "diverged" && r.diff) {
      kids.push(el("div", { "class": "diverged-at", text: "diverged at token " + r.diff.at + " (parent path " + r.diff.parent_len + " tokens, this prompt " + r.diff.child_len + ")" }));
      kids.push(tokenDiff(r.diff, vocab));
      kids.push(el("div", { "class": "tokdiff" }, [el("pre", { text: r.diff.left_text }), el("pre", { text: r.diff.right_text })]));
    }
    return el("div", { "class": "relation" }, kids);
  }

  function callBox(c, vocab) {
    var head = el("div", { "class": "head" }, ["call #" + c.seq + " ",
      el("span", { "class": "tag " + (c.relation || {}).kind, text: (c.relation || {}).kind }),
      el("span", { "class": "tag", text: c.finish_reason }),
      el("span", { "class": "tag", text: "policy v" + fmt(c.policy_version, 0) + (c.policy_version_end != null && c.policy_version_end !== c.policy_version ? "→" + c.policy_version_end : "") })]
      .concat(c.flags.map(function (f) { return el("span", { "class": "tag flag", text: f }); })));
    var t = c.timing || {}, u = c.usage || {};
    var meta = el("div", { "class": "mono", text: c.api + " · " + c.call_id + " · prompt " + fmt(u.prompt_tokens, 0) +
      " + completion " + fmt(u.completion_tokens, 0) + " tokens · queue " + fmt(t.queue_s) + " s, first token " +
      fmt(t.first_token_s) + " s, generate " + fmt(t.generate_s) + " s · sampling " + JSON.stringify(c.sampling) });
    var msgs = el("div", {}, [el("div", { "class": "note", text: c.n_same ? c.n_same + " earlier messages as in the previous call" : "" })]);
    if (c.messages_note) msgs.appendChild(el("div", { "class": "note", text: c.messages_note }));
    c.messages.forEach(function (m) {
      var role = m.role.split(" ")[0];
      msgs.appendChild(el("div", { "class": "msg " + role }, [el("span", { "class": "role", text: m.role }), el("pre", { text: m.text })]));
    });
    var o = c.output || {}, out = [];
    if (o.reasoning) out.push("[reasoning] " + o.reasoning);
    if (o.content) out.push(o.content);
    (o.tool_calls || []).forEach(function (tc) { out.push("[tool call] " + tc.name + "(" + JSON.stringify(tc.arguments) + ")"); });
    if (!out.length) out.push(o.text || "");
    if (c.error) out.push("[error] " + c.error);
    msgs.appendChild(el("div", { "class": "msg output" }, [el("span", { "class": "role", text: "model output" }), el("pre", { text: out.join("\n") })]));
    var details = el("details", {}, [el("summary", { text: "messages and output" }), msgs]);
    if (c.n_same === 0 || c.seq === 0) details.open = true;
    return el("div", { "class": "call", id: "call-" + c.call_id, "data-kind": (c.relation || {}).kind }, [head, meta, relationBox(c, vocab), details]);
  }

  // ------------------------------------------------------------------ heat map
  function colour(mode, lp, adv, iw) {
    if (mode === "logprob") {  // 0 → green, −6 or less → red
      var x = Math.max(0, Math.min(1, -lp / 6));
      return "hsl(" + Math.round(120 * (1 - x)) + ",75%," + Math.round(78 - 8 * x) + "%)";
    }
    if (mode === "advantage") {
      if (adv == null) return "rgba(0,0,0,0.06)";
      var a = Math.max(-1, Math.min(1, adv / 2));
      return a >= 0 ? "rgba(30,136,229," + (0.15 + 0.6 * a) + ")" : "rgba(229,57,53," + (0.15 - 0.6 * a) + ")";
    }
    if (mode === "iw" && iw != null) {  // 1 → pale; below 1 (0 = masked) → red; above → blue
      var d = Math.max(-1, Math.min(1, iw - 1));
      return d >= 0 ? "rgba(30,136,229," + (0.12 + 0.6 * d) + ")" : "rgba(229,57,53," + (0.12 - 0.6 * d) + ")";
    }
    return "rgba(0,0,0,0.06)";
  }

  function renderHeat(data, box) {
    var h = data.heat, vocab = data.vocab;
    box.innerHTML = "";
    if (!h.paths.length) { box.appendChild(el("p", { "class": "note", text: "no trajectories" })); return; }
    var pick = el("select", { id: "heat-path" }), mode = el("select", { id: "heat-mode" });
    h.paths.forEach(function (p, i) {
      pick.appendChild(el("option", { value: String(i), "data-call": p.leaf_call, text: "trajectory → " + p.label + (p.trained ? "" : " (not trained: " + p.why + ")") }));
    });
    [["logprob", "logprob"], ["advantage", "advantage"], ["iw", "importance weight"]].forEach(function (m) {
      var o = el("option", { value: m[0], text: m[1] });
      if ((m[0] === "advantage" && h.advantage == null && !h.per_token) || (m[0] === "iw" && !h.per_token)) o.disabled = true;
      mode.appendChild(o);
    });
    var notes = el("div", { "class": "legend" }, [
      el("div", { text: "Only trained tokens (generated by a trainable call on a trained path) are coloured; prompt text is plain. Logprob: green 0 … red ≤ −6." }),
      h.adv_note ? el("div", { "class": "adv-note", text: h.adv_note }) : el("div", { text: h.per_token ? "advantage and importance weight per token, as the update used them (red < 0 < blue; weight: red < 1 < blue)" + (h.advantage != null ? "; rollout advantage " + fmt(h.advantage) : "") : "advantage of this rollout: " + fmt(h.advantage) }),
      h.iw_note ? el("div", { "class": "iw-note", text: h.iw_note }) : el("div")]);
    var hover = el("div", { id: "hover" }), tokens = el("div", { id: "heat" });
    var whole = el("input", { type: "checkbox", id: "heat-whole" });
    box.appendChild(el("div", {}, [pick, " ", mode, " ", whole, el("label", { "for": "heat-whole", text: " whole path (else long untrained stretches are folded)" })]));
    box.appendChild(notes);
    box.appendChild(hover);
    box.appendChild(tokens);
    function folded(p) {  // [start, end) runs of untrained tokens to fold (keep 24 each side)
      var runs = [], i = 0, n = p.ids.length;
      while (i < n) {
        if (p.lp[i] != null) { i++; continue; }
        var j = i; while (j < n && p.lp[j] == null) j++;
        if (j - i > 120) runs.push([i + 24, j - 24]);
        i = j;
      }
      return runs;
    }
    function draw() {
      var p = h.paths[+pick.value], m = mode.value, frag = document.createDocumentFragment();
      var runs = whole.checked ? [] : folded(p), r = 0;
      p.ids.forEach(function (id, i) {
        if (r < runs.length && i >= runs[r][0]) {
          if (i === runs[r][0]) {
            var f = el("button", { "class": "fold", text: "… " + (runs[r][1] - runs[r][0]) + " untrained tokens …" });
            f.onclick = function () { whole.checked = true; draw(); };
            frag.appendChild(f);
          }
          if (i < runs[r][1] - 1) return;
          r++;
          return;
        }
        var lp = p.lp[i], s = document.createElement("span");
        s.className = lp == null ? "t" : "t tr";
        s.textContent = vocab[String(id)] == null ? "⟨" + id + "⟩" : vocab[String(id)];
        if (lp != null) {
          var adv = p.adv ? p.adv[i] : h.advantage;
          s.style.background = colour(m, lp, adv, p.iw ? p.iw[i] : null);
          s.setAttribute("data-lp", lp);
        }
        s.setAttribute("data-i", i);
        frag.appendChild(s);
      });
      tokens.innerHTML = "";
      tokens.appendChild(frag);
    }
    tokens.addEventListener("mouseover", function (ev) {
      var t = ev.target;
      if (!t.getAttribute || t.getAttribute("data-i") == null) return;
      var p = h.paths[+pick.value], i = +t.getAttribute("data-i"), lp = p.lp[i];
      hover.textContent = "token " + i + " · id " + p.ids[i] + " · " + JSON.stringify(t.textContent) +
        (lp == null ? " · not trained" : " · logprob " + lp.toFixed(4) + " (p = " + Math.exp(lp).toFixed(4) + ")" +
          " · advantage " + fmt(p.adv ? p.adv[i] : h.advantage) +
          " · importance weight " + (p.iw && p.iw[i] != null ? fmt(p.iw[i]) : "not recorded"));
    });
    pick.onchange = draw; mode.onchange = draw; whole.onchange = draw;
    draw();
  }

  // ------------------------------------------------------------------ rollout
  function section(title, kids, id) { return el("div", { "class": "box", id: id || "" }, [el("h2", { text: title })].concat(kids)); }

  function renderRollout(d) {
    var v = $("rollout-view");
    v.innerHTML = "";
    v.appendChild(el("div", {}, [link("← all rollouts", d.step != null ? "#step=" + d.step : "#")]));
    v.appendChild(section("Rollout " + d.id, [el("div", { "class": "mono", text:
      "task " + d.task_id + " · harness " + d.harness + " · group " + d.group_id + " · sample " + d.sample_index +
      (d.step != null ? " · step " + d.step : "") + " · " + d.phase + " · status " + d.status +
      (d.reason ? " (" + d.reason + ")" : "") + " · reward " + fmt(d.reward) + " · end " + (d.end_reason || "–") })], "summary"));
    var ver = [];
    var sub = el("table", { "class": "grid" }, [row(["sub-score", "value"], true)]);
    Object.keys(d.subscores || {}).forEach(function (k) { sub.appendChild(row([k, fmt(d.subscores[k])])); });
    ver.push(sub);
    if (d.verifier) ver.push(el("pre", { text: "status " + d.verifier.status + " · reward " + fmt(d.verifier.reward) + " · exit " + d.verifier.exit_code +
      (d.verifier.reason ? " · " + d.verifier.reason : "") + "\n" + (d.verifier.stdout || "") + (d.verifier.stderr || "") }));
    else ver.push(el("p", { "class": "note", text: "no verifier output recorded" }));
    v.appendChild(el("div", { "class": "nav" }, [["summary", "summary"], ["verifier", "verifier"], ["diff", "workspace diff"], ["calls", "calls"],
      ["tree-box", "prefix tree"], ["heat-box", "heat map"], ["transcript", "harness log"]].map(function (x) {
      var b = el("button", { text: x[1] }); b.onclick = function () { $(x[0]).scrollIntoView(); }; return b; })));
    v.appendChild(section("Verifier", ver, "verifier"));
    var diff = (d.workspace_diff || []).map(function (f) {
      return el("div", {}, [el("div", { "class": "mono", text: f.change + " " + f.path + " (" + f.kind + ")" }), f.diff ? el("pre", { text: f.diff }) : null]);
    });
    v.appendChild(section("Workspace diff", diff.length ? diff : [el("p", { "class": "note", text: "no changes recorded" })], "diff"));
    v.appendChild(section("Calls (" + d.calls.length + ")", d.calls.map(function (c) { return callBox(c, d.vocab); }), "calls"));
    var st = d.tree_stats || {};
    v.appendChild(section("Prefix tree", [el("div", { "class": "mono", id: "tree-stats", text: d.n_leaves + " leaves (trajectories) · " +
      fmt(st.n_nodes, 0) + " nodes · " + fmt(st.unique_tokens, 0) + " unique / " + fmt(st.flat_tokens, 0) + " flat tokens (" +
      fmt(st.compression_ratio, 2) + "×) · dead leaves " + d.dead.length + " · side paths " + d.side.length +
      (d.over_branched.length ? " · OVER-BRANCHED" : "") }),
      el("div", { "class": "legend", text: "blue: tokens generated by a call (trainable) · thick: leaf · dashed grey: dead leaf · orange: side path · [a, b): token positions · ×n: trajectories sharing the node" }),
      el("div", { id: "tree", html: d.tree_html })], "tree-box"));
    var heat = el("div", {});
    v.appendChild(section("Token heat map", [heat], "heat-box"));
    renderHeat(d, heat);
    var tr = (d.transcript || []).map(function (m) { return el("div", { "class": "msg" }, [el("span", { "class": "role", text: m.role }), el("pre", { text: m.text })]); });
    v.appendChild(section("Harness log", [el("details", {}, [el("summary", { text: tr.length + " entries" })].concat(tr))], "transcript"));
    document.title = "clawrl · " + d.id;
  }

  function renderGroup(d) {
    var v = $("group-view"), st = d.tree_stats || {};
    v.innerHTML = "";
    v.appendChild(el("div", {}, [link("← all rollouts", "#")]));
    v.appendChild(section("Group " + d.group_id + " (" + d.rollouts.length + " rollouts)", [
      el("div", { "class": "mono", id: "tree-stats", text: d.n_leaves + " leaves · " + fmt(st.unique_tokens, 0) + " unique / " + fmt(st.flat_tokens, 0) + " flat tokens (" + fmt(st.compression_ratio, 2) + "×)" }),
      el("div", { id: "tree", html: d.tree_html })]));
  }

  // ------------------------------------------------------------------ routing
  function route() {
    var h = location.hash.replace(/^#/, ""), m;
    $("index-view").hidden = true; $("rollout-view").hidden = true; $("group-view").hidden = true;
    status("");
    if ((m = /^r=(\w+)$/.exec(h))) {
      status("loading " + m[1] + "…");
      var t0 = performance.now();
      load(m[1], function (d) { renderRollout(d); $("rollout-view").hidden = false; status(""); window.__clawrl_rendered = { key: m[1], ms: performance.now() - t0 }; });
    } else if ((m = /^g=(\w+)$/.exec(h))) {
      load(m[1], function (d) { renderGroup(d); $("group-view").hidden = false; window.__clawrl_rendered = { key: m[1] }; });
    } else {
      m = /^step=(\d+)$/.exec(h);
      renderIndex(m ? +m[1] : null);
      $("index-view").hidden = false;
      window.__clawrl_rendered = { key: "index" };
    }
  }
  window.addEventListener("hashchange", route);
  route();
})();
