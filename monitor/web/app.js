// The web view of rnicd: polls /api/state and /api/packets and redraws
// the blocks, the QP table and the sequence diagram. No build step.
"use strict";

const hex = (n, w) => "0x" + n.toString(16).padStart(w || 0, "0");
let prev = null;        // the previous /api/state, for rates
let after = 0;          // version of the newest change to the diagram seen
let rows = [];          // the diagram's newest rows, by seq
let lanes = [];
let paused = false;     // the pause button: keep the drawing as it is
const maxRows = 60;

// rate is how fast get(dev) grew since the previous state, per second;
// null before there is a previous state to measure against.
function rate(dev, get) {
  if (!prev) return null;
  const p = prev.devices.find(d => d.name === dev.name);
  if (!p) return null;
  const dt = (state.time_ns - prev.time_ns) / 1e9;
  return dt > 0 ? Math.max(0, (get(dev) - get(p)) / dt) : null;
}
let state = null;

// qpRate is how fast get(qp) grew, summed over the QPs in both this and
// the previous state, per second; mod wraps a PSN's 24 bits (a QP
// destroyed and its number reused counts nothing).
function qpRate(dev, get, mod) {
  if (!prev) return null;
  const p = prev.devices.find(d => d.name === dev.name);
  const dt = (state.time_ns - prev.time_ns) / 1e9;
  if (!p || dt <= 0) return null;
  let n = 0;
  for (const q of dev.qps) {
    const o = p.qps.find(x => x.qpn === q.qpn);
    if (!o) continue;
    let d = get(q) - get(o);
    if (mod) d = ((d % mod) + mod) % mod;
    if (d > 0 && (!mod || d < mod / 2)) n += d;
  }
  return n / dt;
}

function fmtRate(r) {
  if (r === null) return "\u2013"; // not measured yet
  if (r >= 1e6) return (r / 1e6).toFixed(1) + "M/s";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + "k/s";
  return r.toFixed(0) + "/s";
}

function drops(c) {
  let n = 0;
  for (const k in c) if (k.startsWith("drop_")) n += c[k];
  return n;
}

// blocks draws the NIC's blocks left to right, each with three kinds of
// figure kept apart: what it holds now, what passes per second (since
// the previous poll), and what it has done since the daemon started. A
// block is highlighted while it holds work or is in trouble now, and
// says which.
function blocks(dev) {
  const c = d => d.counters, pt = d => d.port;
  const sum = (f) => dev.qps.reduce((a, q) => a + f(q), 0);
  const rts = dev.qps.filter(q => q.state === "RTS").length;
  const inflight = sum(q => q.sq_inflight);
  const timeouts = rate(dev, d => c(d).local_ack_timeout_err);
  const dropping = rate(dev, d => drops(c(d)));
  const naks = rate(dev, d => c(d).rcvd_seq_err + c(d).rcvd_rnr_err);
  const list = [
    { name: "Verbs / doorbell", now: [`doorbell queue ${dev.doorbell_depth}`, `SQ WQEs ${sum(q => q.sq_used)}`, `RQ WRs ${sum(q => q.rq_used)}`],
      rates: [["WRs posted", qpRate(dev, q => q.sq_posted || 0)]],
      why: dev.doorbell_depth > 0 ? `${dev.doorbell_depth} rung doorbell(s) not yet served` : "" },
    { name: "QP manager", now: [`${dev.qps.length} QPs, ${rts} RTS`],
      rates: [["PSNs acked", qpRate(dev, q => q.una_psn, 1 << 24)], ["PSNs rcvd", qpRate(dev, q => q.rq_psn, 1 << 24)], ["ACK timeouts", timeouts]],
      totals: [["ACK timeouts", dev.counters.local_ack_timeout_err]],
      why: timeouts > 0 ? "ACK timeouts now: the peer does not answer, or packets are lost" : "" },
    { name: "WQE engine", now: [`in flight ${inflight} WQE`],
      rates: [["sent", rate(dev, d => c(d).sent_pkts)], ["retx", rate(dev, d => c(d).retransmitted_pkts)]],
      totals: [["sent", dev.counters.sent_pkts], ["retx", dev.counters.retransmitted_pkts]],
      why: inflight > 0 ? `${inflight} WQE(s) sent and waiting for their ACK` : "" },
    { name: "DMA engine", rates: [["out B", rate(dev, d => pt(d).sent_bytes)], ["in B", rate(dev, d => pt(d).rcvd_bytes)]],
      totals: [["out B", dev.port.sent_bytes], ["in B", dev.port.rcvd_bytes]] },
    { name: "RX handler", rates: [["rcvd", rate(dev, d => c(d).rcvd_pkts)], ["drops", dropping]],
      totals: [["rcvd", dev.counters.rcvd_pkts], ["drops", drops(dev.counters)], ["dup", dev.counters.duplicate_request], ["out of seq", dev.counters.out_of_seq_request]],
      why: dropping > 0 ? "dropping packets now (drop_* counters below)" : "" },
    { name: "Completer", rates: [["done", rate(dev, d => c(d).rdma_sends + c(d).rdma_recvs)], ["NAKs", naks]],
      totals: [["NAKs rcvd", dev.counters.rcvd_seq_err], ["RNR NAKs", dev.counters.rcvd_rnr_err]],
      why: naks > 0 ? "NAKs arriving now: the peer saw a gap or had no receive posted" : "" },
    flowControl(dev),
    { name: "Port", now: [dev.fault ? `fault tx: ${dev.fault_cfg.tx}` : "no injector", dev.fault ? `fault rx: ${dev.fault_cfg.rx}` : ""],
      rates: [["tx", rate(dev, d => pt(d).sent_pkts)], ["rx", rate(dev, d => pt(d).rcvd_pkts)]],
      totals: [["tx", dev.port.sent_pkts], ["rx", dev.port.rcvd_pkts], ["ICRC errors", dev.port.icrc_err]],
      why: dev.fault && (dev.fault_cfg.tx !== "off" || dev.fault_cfg.rx !== "off") ? "the fault injector impairs packets" : "" },
  ];
  const group = (cls, title, figs) => figs && figs.length ?
    `<div class="group ${cls}"><div class="glabel">${title}</div>` + figs.join("") + `</div>` : "";
  return `<div class="blocks">` + list.map(b =>
    `<div class="block${b.why ? " busy" : ""}" data-name="${b.name}"${b.why ? ` title="highlighted: ${b.why}"` : ""}><div class="name">${b.name}</div>` +
    group("now", "now", (b.now || []).filter(f => f).map(f => `<div class="fig">${f}</div>`)) +
    group("rates", "per second", (b.rates || []).map(([k, v]) => `<div class="fig rate">${k} ${fmtRate(v)}</div>`)) +
    group("totals", "since start", (b.totals || []).map(([k, v]) => `<div class="fig total">${k} ${v ?? 0}</div>`)) +
    (b.why ? `<div class="why">&#x25B2; ${b.why}</div>` : "") + `</div>`).join("") + `</div>`;
}

// flowControl is the Flow Control block (rnic/flowctl): the algorithm,
// the QPs its pacer slows now, and the mlx5 counters of both of its
// halves, the notification point (np_: CE-marked packets in, CNPs out)
// and the reaction point (rp_: CNPs in, taken or ignored).
function flowControl(dev) {
  const c = d => d.counters;
  const paced = dev.qps.filter(q => q.cc_paced);
  const slowest = paced.length ? Math.min(...paced.map(q => q.cc_rate)) : 0;
  const cnps = rate(dev, d => c(d).rp_cnp_handled || 0);
  const ce = rate(dev, d => c(d).np_ecn_marked_roce_packets || 0);
  return { name: "Flow Control", now: [`cc ${dev.cc || "none"}`, `${paced.length} QP(s) paced`, paced.length ? `slowest ${fmtBits(slowest)}` : ""],
    rates: [["CE rcvd", ce], ["CNP sent", rate(dev, d => c(d).np_cnp_sent || 0)], ["CNP handled", cnps]],
    totals: [["np_ecn_marked_roce_packets", c(dev).np_ecn_marked_roce_packets], ["np_cnp_sent", c(dev).np_cnp_sent],
      ["rp_cnp_handled", c(dev).rp_cnp_handled], ["rp_cnp_ignored", c(dev).rp_cnp_ignored]],
    why: cnps > 0 ? "CNPs arriving now: DCQCN cuts the rate of the QPs they name" :
      ce > 0 ? "packets arrive marked CE: the NIC answers with CNPs" : "" };
}

// fmtBits says a rate in bits per second as tc and ethtool do.
function fmtBits(b) {
  if (b >= 1e9) return (b / 1e9).toFixed(1) + " Gbit/s";
  if (b >= 1e6) return (b / 1e6).toFixed(1) + " Mbit/s";
  if (b >= 1e3) return (b / 1e3).toFixed(1) + " kbit/s";
  return b.toFixed(0) + " bit/s";
}

function fmtBytes(b) {
  if (b >= 1 << 20) return (b / (1 << 20)).toFixed(1) + " MB";
  if (b >= 1 << 10) return (b / (1 << 10)).toFixed(0) + " KB";
  return b + " B";
}

// history keeps, per device, the last keepSamples polls of what the
// rate chart draws: each QP's current and target rate and the
// congestion point's queue depth. The page is the only memory: the
// daemon keeps no history, so the chart starts when the page opens.
const history = {};
const keepSamples = 240; // 2 minutes at one poll every 0.5 s

// steps keeps, per device and QP, the reaction point's steps from the
// trace ([time, rate, target], via /api/packets): every cut and every
// increase, which is the sawtooth; polls alone would miss it (DCQCN's
// timer steps every 300 us). keepSteps bounds what one QP keeps.
const steps = {};
const keepSteps = 4000;
let ratesAfter = 0;

function recordSteps(rs) {
  for (const r of rs) {
    const d = steps[r.nic] || (steps[r.nic] = {});
    const q = d[r.qpn] || (d[r.qpn] = []);
    q.push([r.time_ns, r.rate, r.target]);
    if (q.length > keepSteps) q.splice(0, q.length - keepSteps);
    ratesAfter = r.seq;
  }
}

function record() {
  for (const dev of state.devices) {
    const h = history[dev.name] || (history[dev.name] = []);
    const qps = {};
    for (const q of dev.qps) if (q.cc_rate) qps[q.qpn] = [q.cc_rate, q.cc_target];
    const depth = {};
    if (dev.fault) for (const dir in dev.links || {}) depth[dir] = dev.fault[dir.toUpperCase()].QueueDepth;
    h.push({ t: state.time_ns, qps, depth });
    if (h.length > keepSamples) h.shift();
  }
}

const qpColors = ["#2f6fd0", "#d0342c", "#2e9d3a", "#b3409b", "#e07b00", "#138a8a", "#6b4fd0", "#8a6d00"];

// chart draws one time series panel as SVG: series is a list of
// {name, color, dash, points: [[t, v]...]}, hlines marks levels (Kmin,
// Kmax, the queue's size), fmt says a value. The x axis is the last
// keepSamples polls, newest at the right.
function chart(id, title, series, ymax, fmt, hlines, from) {
  if (from) series = series.map(s => ({ ...s, points: s.points.filter(p => p[0] >= from) })).filter(s => s.points.length);
  const w = 560, l = 92, r = 12, top = 22 + 14 * Math.ceil(series.length / 2), bot = 26, h = top + 160 + bot;
  const all = series.flatMap(s => s.points);
  if (!all.length) return `<svg class="chart" id="${id}" width="${w}" height="${h}"><text x="${w / 2}" y="${h / 2}" text-anchor="middle" fill="#666">${title}: nothing yet</text></svg>`;
  const t1 = Math.max(...all.map(p => p[0])), t0 = Math.min(...all.map(p => p[0]));
  ymax = Math.max(ymax || 0, ...all.map(p => p[1]), 1);
  const X = t => l + (w - l - r) * (t - t0) / Math.max(t1 - t0, 1);
  const Y = v => top + (h - top - bot) * (1 - v / ymax);
  let out = `<svg class="chart" id="${id}" width="${w}" height="${h}" xmlns="http://www.w3.org/2000/svg">`;
  out += `<text x="${l}" y="14" font-weight="bold">${title}</text>`;
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    out += `<line x1="${l}" x2="${w - r}" y1="${Y(f * ymax)}" y2="${Y(f * ymax)}" stroke="#e3e6ec"/>`;
    out += `<text x="${l - 4}" y="${Y(f * ymax) + 4}" text-anchor="end" fill="#555">${fmt(f * ymax)}</text>`;
  }
  out += `<text x="${w - r}" y="${h - 6}" text-anchor="end" fill="#555">now</text><text x="${l}" y="${h - 6}" fill="#555">${((t1 - t0) / 1e9).toFixed(t1 - t0 < 10e9 ? 1 : 0)} s ago</text>`;
  for (const [v, name] of hlines || []) {
    out += `<line class="level" x1="${l}" x2="${w - r}" y1="${Y(v)}" y2="${Y(v)}" stroke="#d99a00" stroke-dasharray="3,3"/>`;
    out += `<text x="${w - r - 2}" y="${Y(v) - 3}" text-anchor="end" fill="#8a5a00">${name}</text>`;
  }
  series.forEach((s, i) => {
    const pts = s.points.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
    const last = s.points[s.points.length - 1];
    out += `<polyline class="series" data-name="${s.name}" data-last="${last[1]}" data-n="${s.points.length}" data-max="${Math.max(...s.points.map(p => p[1]))}" data-min="${Math.min(...s.points.map(p => p[1]))}" points="${pts}" fill="none" stroke="${s.color}" stroke-width="2"${s.dash ? ' stroke-dasharray="6,4"' : ""}/>`;
    out += `<text class="key" x="${l + 8 + (i % 2) * 210}" y="${32 + Math.floor(i / 2) * 14}" fill="${s.color}">${s.dash ? "- - " : "\u2014 "}${s.name} ${fmt(last[1])}</text>`;
  });
  return out + `</svg>`;
}

// rateCharts draws, for a device whose QPs DCQCN has slowed, each QP's
// current rate (solid) and target rate (dashed) over time, the sawtooth
// of DCQCN: a cut on each CNP, then fast recovery toward the target,
// additive and hyper increase; beside it the congestion point's queue,
// with RED's Kmin and Kmax, whose marks cause the cuts.
function rateCharts(dev) {
  const h = history[dev.name] || [];
  const st = steps[dev.name] || {};
  // The QPs there are now: a QP destroyed goes from the chart (and its
  // steps from memory), as its lane goes from the diagram.
  const live = new Set(dev.qps.map(q => String(q.qpn)));
  for (const qpn in st) if (!live.has(qpn)) delete st[qpn];
  const qpns = [...new Set(h.flatMap(s => Object.keys(s.qps)).concat(Object.keys(st)))].filter(q => live.has(q));
  const dirs = Object.keys(dev.links || {});
  if (!qpns.length && !dirs.length) return "";
  const series = [];
  qpns.forEach((qpn, i) => {
    // From the trace's steps, drawn as steps, when the page has them;
    // else from the polls.
    const pts = k => st[qpn] && st[qpn].length ? st[qpn].flatMap((p, j, a) => j ? [[p[0], a[j - 1][k + 1]], [p[0], p[k + 1]]] : [[p[0], p[k + 1]]]) :
      h.filter(s => s.qps[qpn]).map(s => [s.t, s.qps[qpn][k]]);
    const col = qpColors[i % qpColors.length];
    series.push({ name: `qp ${hex(+qpn)} rate`, color: col, points: pts(0) });
    series.push({ name: `qp ${hex(+qpn)} target`, color: col, dash: true, points: pts(1) });
  });
  const queues = dirs.map((dir, i) => ({ name: `${dir} queue`, color: qpColors[(i + 4) % qpColors.length],
    points: h.filter(s => dir in s.depth).map(s => [s.t, s.depth[dir]]) }));
  const link = dev.links && dev.links[dirs[0]];
  const levels = link ? [[link.kmin_bytes, "Kmin"], [link.kmax_bytes, "Kmax"], [link.queue_bytes, "queue size"]] : [];
  // Both charts over the same time: the rate steps' span.
  const from = Math.min(...series.map(s => s.points.length ? s.points[0][0] : Infinity));
  return `<div class="charts">` +
    (qpns.length ? chart(`rate-${dev.name}`, "rate per QP: current (solid), target (dashed)", series, 0, fmtBits) : "") +
    (dirs.length ? chart(`queue-${dev.name}`, `congestion point queue (${dirs.map(d => d + ": " + fmtBits(dev.links[d].rate_bps)).join(", ")})`, queues, link.queue_bytes, fmtBytes, levels, isFinite(from) ? from : 0) : "") +
    `</div>`;
}

function qpTable(dev) {
  const rows = dev.qps.map(q => {
    const sqBar = q.sq_cap ? `<span class="bar" style="width:${Math.round(60 * q.sq_used / q.sq_cap)}px"></span>` : "";
    return `<tr class="qp" data-qpn="${q.qpn}"><td>${hex(q.qpn)}</td><td class="l">${q.type}</td><td class="l">${q.state}</td>` +
      `<td class="sqpsn">${hex(q.sq_psn, 6)}</td><td>${hex(q.una_psn, 6)}</td><td class="rqpsn">${hex(q.rq_psn, 6)}</td>` +
      `<td class="l">${q.dest || "-"}</td><td>${q.dest_qpn ? hex(q.dest_qpn) : "-"}</td><td>${q.path_mtu}</td>` +
      `<td class="l">${q.sq_used}/${q.sq_cap} (${q.sq_inflight} in flight)${sqBar}</td><td>${q.rq_used}${q.rq_cap ? "/" + q.rq_cap : ""}</td>` +
      `<td class="ccrate">${q.cc_rate ? fmtBits(q.cc_rate) : "-"}</td><td>${q.cc_target ? fmtBits(q.cc_target) : "-"}</td><td>${q.cc_rate ? (q.cc_alpha || 0) + "/1024" : "-"}</td></tr>`;
  }).join("");
  return `<table><thead><tr><th>QPN</th><th class="l">type</th><th class="l">state</th><th>SQ PSN</th><th>unacked PSN</th>` +
    `<th>RQ PSN</th><th class="l">dest</th><th>dest QPN</th><th>MTU</th><th class="l">SQ ring</th><th>RQ ring</th><th>rate</th><th>target</th><th>alpha</th></tr></thead>` +
    `<tbody>${rows}</tbody></table>`;
}

function drawDevices() {
  const el = document.getElementById("devices");
  el.innerHTML = state.devices.map(dev =>
    `<div class="panel device" data-name="${dev.name}"><h3>${dev.name} <span class="sub">${dev.addr} &middot; gid ${dev.gid} &middot; active MTU ${dev.active_mtu}</span></h3>` +
    blocks(dev) + rateCharts(dev) + qpTable(dev) +
    `<div class="counters"><b>since start:</b> ${Object.keys(dev.counters).sort().filter(k => dev.counters[k]).map(k => `${k} ${dev.counters[k]}`).join(" &middot; ")}</div></div>`
  ).join("");
}

const colors = { request: "#2f6fd0", response: "#138a8a", ack: "#2e9d3a", nak: "#d0342c", rnr: "#b3409b", cnp: "#6b4fd0" };
const retxColor = "#e07b00";

// mergeRows takes the rows /api/packets says changed: a run grows after
// it is first drawn, so a row already here is replaced by its seq. Rows
// whose lane is gone (the QPs of a finished run) go with it.
function mergeRows(changed) {
  for (const r of changed) {
    let i = rows.length - 1;
    while (i >= 0 && rows[i].seq > r.seq) i--;
    if (i >= 0 && rows[i].seq === r.seq) rows[i] = r;
    else rows.splice(i + 1, 0, r);
  }
  const names = new Set(lanes.map(l => l.name));
  rows = rows.filter(r => names.has(r.from) && names.has(r.to)).slice(-maxRows);
}

function fmtCount(n) { return n.toLocaleString("en-US"); }

function fmtClock(ns) {
  const d = new Date(ns / 1e6);
  return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function fmtSpan(ns) {
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
  return (ns / 1e3).toFixed(0) + " us";
}

// rowLabel says what a row is: one packet by its opcode and PSN, a run
// by its opcode class, count, PSN range, bytes and time span.
function rowLabel(p) {
  const cnp = p.kind === "cnp"; // a CNP has no PSN (annex A17.9.3)
  const op = o => o.replace(/^ROCE_/, "");
  let label;
  if (p.count > 1) {
    label = `${op(p.class)} \u00d7${fmtCount(p.count)}`;
    if (!cnp) label += ` psn ${hex(p.psn, 6)}\u2026${hex(p.last_psn, 6)}`;
    if (p.kind === "request" || p.kind === "response") label += ` ${fmtBytes(p.bytes)}`;
    label += ` in ${fmtSpan(p.last_time_ns - p.time_ns)}`;
  } else {
    label = op(p.opcode) + (cnp ? "" : ` psn ${hex(p.psn, 6)}`);
  }
  if (p.syndrome && p.kind !== "ack") label += ` ${p.syndrome}`;
  if (p.from_qpn && p.to_qpn) label += ` qp ${hex(p.from_qpn)}\u2192${hex(p.to_qpn)}`;
  if (p.retransmit) label += " (retx)";
  if (p.lost) label += " LOST";
  return label;
}

// drawSequence draws a row per run of like packets (the count on its
// label and a thicker arrow), a row per loss and NAK: the label above
// its arrow, on a white halo, never crossed by it.
function drawSequence() {
  const svg = document.getElementById("seq");
  const width = 1000, top = 40, step = 26, timeCol = 96;
  const h = top + step * Math.max(rows.length, 1) + 10;
  svg.setAttribute("width", width);
  svg.setAttribute("height", h);
  const x = {};
  lanes.forEach((l, i) => { x[l.name] = timeCol + 110 + i * (width - timeCol - 220) / Math.max(1, lanes.length - 1); });
  let out = "";
  out += `<defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>`;
  // Each lane: its name (a device, or the far end's address) and what is
  // known of it (the far end's QPs).
  lanes.forEach(l => {
    out += `<g class="lane"><text class="lane-name" x="${x[l.name]}" y="12" text-anchor="middle" font-weight="bold">${l.name}</text>`;
    out += `<text class="lane-detail" x="${x[l.name]}" y="24" text-anchor="middle" fill="#666">${l.detail}</text></g>`;
    out += `<line x1="${x[l.name]}" y1="28" x2="${x[l.name]}" y2="${h}" stroke="#bbb" stroke-width="2"/>`;
  });
  if (!rows.length) {
    out += `<text class="empty" x="${width / 2}" y="${top + 20}" text-anchor="middle" fill="#666">no packet since this page opened: the trace records only while it is watched</text>`;
  }
  rows.forEach((p, i) => {
    const y = top + i * step;
    const x1 = x[p.from] ?? timeCol + 20, x2 = x[p.to] ?? width - 20;
    const col = p.retransmit ? retxColor : colors[p.kind] || "#444";
    const ly = y + 19, end = p.lost ? (x1 + x2) / 2 : x2;
    out += `<g class="pkt" data-op="${p.opcode}" data-class="${p.class}" data-psn="${p.psn}" data-last-psn="${p.last_psn}" data-count="${p.count}" data-kind="${p.kind}"${p.lost ? ' data-lost="1"' : ""}${p.retransmit ? ' data-retx="1"' : ""}>`;
    out += `<text class="time" x="4" y="${y + 15}" fill="#888">${fmtClock(p.time_ns)}</text>`;
    out += `<line x1="${x1}" y1="${ly}" x2="${end}" y2="${ly}" stroke="${col}" stroke-width="${p.count > 1 ? 4 : 2}"${p.lost ? ' stroke-dasharray="5,4"' : ' marker-end="url(#arr)"'}/>`;
    if (p.lost) out += `<text x="${end}" y="${ly + 5}" fill="${col}" text-anchor="middle" font-size="14">&#x2716;</text>`;
    out += `<text class="label" x="${(x1 + x2) / 2}" y="${y + 13}" text-anchor="middle" fill="${col}"${p.count > 1 ? ' font-weight="bold"' : ""}>${rowLabel(p)}</text></g>`;
  });
  svg.innerHTML = out;
  const wrap = document.getElementById("seq-wrap");
  wrap.scrollTop = wrap.scrollHeight;
}

// show takes a look at the devices and the diagram's changes and draws
// them.
function show(s, pk) {
  prev = state; state = s;
  record();
  recordSteps(pk.rates || []);
  lanes = pk.lanes;
  mergeRows(pk.packets);
  after = pk.next;
  drawDevices();
  drawSequence();
  document.getElementById("status").textContent = "live " + new Date().toLocaleTimeString() + (pk.recording || rows.length ? "" : " (starting trace)");
}

async function poll() {
  try {
    const [s, pk] = await Promise.all([
      fetch("api/state").then(r => r.json()),
      fetch("api/packets?after=" + after + "&rates_after=" + ratesAfter).then(r => r.json()),
    ]);
    if (!paused) show(s, pk);
  } catch (e) {
    document.getElementById("status").textContent = "disconnected: " + e;
  }
  setTimeout(poll, 500);
}

// pause keeps the drawing as it is, to read it; the page goes on asking
// (the daemon records packets only while a page asks) and draws the
// newest again on resume.
function pause(on) {
  paused = on;
  const b = document.getElementById("pause");
  b.textContent = on ? "resume" : "pause";
  b.classList.toggle("on", on);
  document.body.dataset.paused = on ? "1" : "";
  if (on) document.getElementById("status").textContent = "paused";
}
document.getElementById("pause").addEventListener("click", () => pause(!paused));

// The first frame is drawn from api/boot.js, which index.html loads
// before this script: two looks at the NIC 300 ms apart and the packets
// between them, so the page opens on the NIC with measured rates (and,
// on a busy NIC, packets) before the browser's load event.
if (typeof boot !== "undefined") {
  state = boot.prev;
  show(boot.state, boot.packets);
  // What the page showed first, for whoever checks that it opens with
  // figures rather than zeros and an empty diagram (its tests do).
  document.body.dataset.firstRates = Array.from(document.querySelectorAll(".block[data-name='Port'] .rate")).map(e => e.textContent).join("|");
  document.body.dataset.firstPackets = String(rows.length);
}
setTimeout(poll, 500);
