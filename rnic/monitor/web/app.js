// The web view of rnicd: polls /api/state and /api/packets and redraws
// the blocks, the QP table and the sequence diagram. No build step.
"use strict";

const hex = (n, w) => "0x" + n.toString(16).padStart(w || 0, "0");
let prev = null;        // the previous /api/state, for rates
let after = 0;          // newest packet seen
let packets = [];       // recent packets for the diagram
let lanes = [];
const maxPackets = 60;

function rate(dev, get) {
  if (!prev) return 0;
  const p = prev.devices.find(d => d.name === dev.name);
  if (!p) return 0;
  const dt = (state.time_ns - prev.time_ns) / 1e9;
  return dt > 0 ? Math.max(0, (get(dev) - get(p)) / dt) : 0;
}
let state = null;

function fmtRate(r) {
  if (r >= 1e6) return (r / 1e6).toFixed(1) + "M/s";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + "k/s";
  return r.toFixed(0) + "/s";
}

function drops(c) {
  let n = 0;
  for (const k in c) if (k.startsWith("drop_")) n += c[k];
  return n;
}

function blocks(dev) {
  const c = d => d.counters, pt = d => d.port;
  const sum = (f) => dev.qps.reduce((a, q) => a + f(q), 0);
  const rts = dev.qps.filter(q => q.state === "RTS").length;
  const list = [
    ["Verbs / doorbell", [`doorbell queue ${dev.doorbell_depth}`, `SQ WQEs ${sum(q => q.sq_used)}`, `RQ WRs ${sum(q => q.rq_used)}`], dev.doorbell_depth > 0],
    ["QP manager", [`${dev.qps.length} QPs, ${rts} RTS`, `timeouts ${fmtRate(rate(dev, d => c(d).local_ack_timeout_err))}`], false],
    ["WQE engine", [`sent ${fmtRate(rate(dev, d => c(d).sent_pkts))}`, `in flight ${sum(q => q.sq_inflight)} WQE`, `retx ${fmtRate(rate(dev, d => c(d).retransmitted_pkts))}`], sum(q => q.sq_inflight) > 0],
    ["DMA engine", [`out ${fmtRate(rate(dev, d => pt(d).sent_bytes))} B`, `in ${fmtRate(rate(dev, d => pt(d).rcvd_bytes))} B`], false],
    ["RX handler", [`rcvd ${fmtRate(rate(dev, d => c(d).rcvd_pkts))}`, `drops ${drops(dev.counters)}`, `dup ${dev.counters.duplicate_request} oos ${dev.counters.out_of_seq_request}`], false],
    ["Completer", [`done ${fmtRate(rate(dev, d => c(d).rdma_sends + c(d).rdma_recvs))}`, `NAKs rcvd ${dev.counters.rcvd_seq_err}`, `RNR ${dev.counters.rcvd_rnr_err}`], false],
    ["Port", [`tx ${fmtRate(rate(dev, d => pt(d).sent_pkts))}`, `rx ${fmtRate(rate(dev, d => pt(d).rcvd_pkts))}`, `icrc err ${dev.port.icrc_err}`,
      dev.fault ? `fault tx ${dev.fault_cfg.tx}` : "no injector"], false],
  ];
  return `<div class="blocks">` + list.map(([name, figs, busy]) =>
    `<div class="block${busy ? " busy" : ""}"><div class="name">${name}</div>` +
    figs.map(f => `<div class="fig">${f}</div>`).join("") + `</div>`).join("") + `</div>`;
}

function qpTable(dev) {
  const rows = dev.qps.map(q => {
    const sqBar = q.sq_cap ? `<span class="bar" style="width:${Math.round(60 * q.sq_used / q.sq_cap)}px"></span>` : "";
    return `<tr class="qp" data-qpn="${q.qpn}"><td>${hex(q.qpn)}</td><td class="l">${q.type}</td><td class="l">${q.state}</td>` +
      `<td class="sqpsn">${hex(q.sq_psn, 6)}</td><td>${hex(q.una_psn, 6)}</td><td class="rqpsn">${hex(q.rq_psn, 6)}</td>` +
      `<td class="l">${q.dest || "-"}</td><td>${q.dest_qpn ? hex(q.dest_qpn) : "-"}</td><td>${q.path_mtu}</td>` +
      `<td class="l">${q.sq_used}/${q.sq_cap} (${q.sq_inflight} in flight)${sqBar}</td><td>${q.rq_used}${q.rq_cap ? "/" + q.rq_cap : ""}</td></tr>`;
  }).join("");
  return `<table><thead><tr><th>QPN</th><th class="l">type</th><th class="l">state</th><th>SQ PSN</th><th>unacked PSN</th>` +
    `<th>RQ PSN</th><th class="l">dest</th><th>dest QPN</th><th>MTU</th><th class="l">SQ ring</th><th>RQ ring</th></tr></thead>` +
    `<tbody>${rows}</tbody></table>`;
}

function drawDevices() {
  const el = document.getElementById("devices");
  el.innerHTML = state.devices.map(dev =>
    `<div class="panel device" data-name="${dev.name}"><h3>${dev.name} <span class="sub">${dev.addr} &middot; gid ${dev.gid} &middot; active MTU ${dev.active_mtu}</span></h3>` +
    blocks(dev) + qpTable(dev) +
    `<div class="counters">${Object.keys(dev.counters).sort().filter(k => dev.counters[k]).map(k => `${k} ${dev.counters[k]}`).join(" &middot; ")}</div></div>`
  ).join("");
}

const colors = { request: "#2f6fd0", response: "#138a8a", ack: "#2e9d3a", nak: "#d0342c", rnr: "#b3409b" };

function drawSequence() {
  const svg = document.getElementById("seq");
  const width = 900, top = 30, step = 26;
  const shown = packets.slice(-maxPackets);
  const h = top + step * shown.length + 20;
  svg.setAttribute("width", width);
  svg.setAttribute("height", h);
  const x = {};
  lanes.forEach((l, i) => { x[l] = 150 + i * (width - 300) / Math.max(1, lanes.length - 1); });
  let out = "";
  out += `<defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>`;
  lanes.forEach(l => {
    out += `<text x="${x[l]}" y="16" text-anchor="middle" font-weight="bold">${l}</text>`;
    out += `<line x1="${x[l]}" y1="22" x2="${x[l]}" y2="${h}" stroke="#999" stroke-width="2"/>`;
  });
  shown.forEach((p, i) => {
    const y = top + i * step;
    const x1 = x[p.from] ?? 40, x2 = x[p.to] ?? width - 40;
    let col = colors[p.kind] || "#444";
    if (p.retransmit) col = "#e07b00";
    const end = p.lost ? (x1 + x2) / 2 : x2;
    const dash = p.lost ? ` stroke-dasharray="5,4"` : "";
    out += `<g class="pkt" data-op="${p.opcode}" data-psn="${p.psn}" data-kind="${p.kind}"${p.lost ? ' data-lost="1"' : ""}${p.retransmit ? ' data-retx="1"' : ""}>`;
    out += `<line x1="${x1}" y1="${y}" x2="${end}" y2="${y + step - 8}" stroke="${col}" stroke-width="2"${dash}${p.lost ? "" : ' marker-end="url(#arr)"'}/>`;
    if (p.lost) out += `<text x="${end}" y="${y + step - 4}" fill="${col}" text-anchor="middle" font-size="16">&#x2716;</text>`;
    let label = `${p.opcode} psn ${hex(p.psn, 6)}`;
    if (p.syndrome && p.kind !== "ack") label += ` ${p.syndrome}`;
    if (p.retransmit) label += " (retx)";
    if (p.lost) label += " LOST";
    const lx = (x1 + x2) / 2;
    out += `<text class="label" x="${lx}" y="${y + 6}" text-anchor="middle" fill="${col}">${label}</text></g>`;
  });
  svg.innerHTML = out;
  const wrap = document.getElementById("seq-wrap");
  wrap.scrollTop = wrap.scrollHeight;
}

async function poll() {
  try {
    const [s, pk] = await Promise.all([
      fetch("api/state").then(r => r.json()),
      fetch("api/packets?after=" + after).then(r => r.json()),
    ]);
    prev = state; state = s;
    lanes = pk.lanes;
    if (pk.packets.length) {
      packets = packets.concat(pk.packets).slice(-maxPackets);
      after = pk.packets[pk.packets.length - 1].seq;
    }
    drawDevices();
    drawSequence();
    document.getElementById("status").textContent = "live " + new Date().toLocaleTimeString() + (pk.recording ? "" : " (starting trace)");
  } catch (e) {
    document.getElementById("status").textContent = "disconnected: " + e;
  }
  setTimeout(poll, 500);
}
poll();
