/**
 * view_model.js — what the page and the DSH plugin show of a status document, as plain cells (pure: no
 * DOM, no React). The page (page/app.js) and the plugin (dsh_plugin/src/client/) only lay these cells
 * out, so both show the same rows, values, words and flags (tests/browser/test_same_cells.py compares
 * them); wording and numbers come from format.js and efficiency.js, every word from the catalogue.
 *
 *   PROCESS_COLUMNS            [{key, label, num}]: the process table's columns, in order (`label`: a
 *                              catalogue key; `num`: a right-aligned figure).
 *   processRows(doc, lang)     the rows of the process table in tree order (children under their
 *                              parent, by pid): processRow's, with `depth` and `branch` ('├─', '└─',
 *                              null at the root).
 *   processRow(doc, proc, lang)  one process: {pid, ppid, role, probed, exited, cells}; `cells` by
 *                              column key (below); a cell whose value is absent has `na: true`.
 *     process   {name, pid, exited: null | {text, title}, cmd, probeError}
 *     role      {text, probed, title}: its role, or "no probe" (has_probe is not true)
 *     models    {items: [{device: chip, label}], na}: each model, its device and what it is
 *     inputs    {items: [chip], na}: the devices its models' inputs were on, each once
 *     gpuMem    {text, title, na}: its memory over its GPUs (the title: per GPU)
 *     sm        {text, na}: smText (efficiency.js)
 *     cpu       {text, na}
 *     dataWait  {value, window, source, flag, na}: dataWait (efficiency.js); `flag` 'high' when the
 *               verdict would call it data-starved (DATA_WAIT_HIGH_FRACTION)
 *     chip      {text, kind, device}: deviceText, deviceKind and the device as the document names it.
 *   gpuCards(doc, lang)        {cards: [gpuCard], unusable: [igpuCard], none: null | {text, error}}:
 *                              the GPU grid; `none` when NVML lists no GPU.
 *   gpuCard(doc, gpu, lang)    {index, title, name, nameTitle, modelHere, tag, framework, utilLevel,
 *                              meters: [{key, label, pct, value, color}], procsTitle, procs: [{pid, role,
 *                              mem}], noProcs, mig: null | {title, rows}}; `tag` null | {kind, text}; `rows`:
 *                              migRows (efficiency.js) with `pidsText`, the processes in each instance.
 *   igpuCard(sysGpu, lang)     {pci, vendor, name, badge, note, meta}: a GPU NVML does not drive.
 *   heroFacts(doc, lang)       [{key, label, text, chip, title}]: the summary's facts (`chip` for devices;
 *                              `title` null, or podTitle for the pod); `run` and `pod` only for a job of a
 *                              distributed run, or in a pod.
 *   runtimeFacts(doc, lang)    {items: [{key, label, value, bad}], error, interval}: the footer.
 *
 * A list of jobs (Job of a status or jobs document: the page's job switcher, the plugin's session jobs):
 *   orderJobs(jobs)            {live, exited}: the one order of every job list. Live jobs first: the
 *                              viewer's own (`yours`, the sidecar marks them for whoever asks) before the
 *                              others, the newest started first within each; then exited ones, the newest
 *                              ended first.
 *   jobList(jobs, lang, shown)  {live: [jobRow], exited: [jobRow], exitedLabel, exitedOpen}: the rows in
 *                              that order; the exited ones are collapsed under `exitedLabel` ("Exited jobs
 *                              (N)"; null: none), open (`exitedOpen`) only when the shown job is one of them.
 *   jobRow(job, lang)          {id, status, alive, pid, cmd, user, exited: null | text, message}.
 *   defaultJobId(...groups)    the job shown when none is chosen: the first live job (orderJobs: the
 *                              viewer's newest) of the first group with one, else the newest exited one of
 *                              the first group with any; null.
 *
 * The cluster view (a ClusterDocument, GET /api/dsh-gpu-dashboard/cluster, from a sidecar started with --prometheus):
 *   CLUSTER_NODE_COLUMNS, CLUSTER_RANK_COLUMNS  [{key, label, num}], as PROCESS_COLUMNS
 *     (clusterView's nodeColumns: the node columns for its GPUs' vendors).
 *   clusterNodeRows(cluster, lang)  one row per GPU of each node (one for a node without GPUs):
 *                              {node, first, reporting, cells}; `first` on a node's first row (node and
 *                              state are shown there); cells node {text}, state {text, flag: null |
 *                              'missing', title}, gpu, util {text, level}, mem, clock, sm {text, na},
 *                              slowedBy {items: [{name, kind, label}], text, na}.
 *   clusterRankRows(job, lang)  {rank, node, cells} by rank: rank, node, gpus, rate, dataWait (`flag`
 *                              'high' as in the process table), forward, optimizer, other,
 *                              collectiveWait (its wait for the slowest rank; `straggler-rank` names it).
 *   clusterView(cluster, statusDoc, lang)  {summary, nodes: rows, warnings: [{code, severity, sev, message,
 *                              hint}], jobs: [{key, title, status, warnings, ranks: rows}], matched,
 *                              distributed, line, undistributed}: the job whose job_key and uid are the
 *                              status document's distributed.job_key and .uid (`matched`), else every
 *                              job the document lists (its distributed ones). `distributed`: the status
 *                              document's job is one (isDistributed); when it is not, the section is
 *                              `line` alone, one sentence, no tables. `undistributed`: the sentence for
 *                              the document's undistributed_jobs, null when none.
 *   isDistributed(run)         a status document's `distributed` is a job of more than one rank: its
 *                              world size, or the ranks seen on this node, say so.
 */

import {
  NA, UTIL_COLORS, cmdText, cudaText, deviceKind, deviceText, fmtCount, fmtMiB, fmtPct, fmtRate,
  fmtAgo, fmtFraction, gpuFrameworkKey, gpuFrameworkText, gpuMemPct, memOfText, messageText, modelGpu, roleText,
  severityOf, sortWarnings, statusOf, t, unusableGpus, utilLevel, vendorName, warningHint, warningMessage,
} from './format.js';
import { dataWait, migRows, reasonKind, smText, utilText } from './efficiency.js';

const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const present = (x) => x !== null && x !== undefined && x !== '';
const list = (x) => (Array.isArray(x) ? x.filter(Boolean) : []);

// The verdict's data-starved threshold (Rules.data_wait_starved, sidecar/verdict/facts.py; a test keeps
// them equal): a data wait at or over it is flagged where it is shown.
export const DATA_WAIT_HIGH_FRACTION = 0.5;
// The memory meter's fill: one colour, the verdict flags memory trouble in its warnings.
export const MEM_METER_COLOR = '#7c3aed';

export const PROCESS_COLUMNS = [
  { key: 'process', label: 'col.process', num: false },
  { key: 'role', label: 'col.role', num: false },
  { key: 'models', label: 'col.modelDevice', num: false },
  { key: 'inputs', label: 'col.inputDevice', num: false },
  { key: 'gpuMem', label: 'col.gpuMem', num: true },
  { key: 'sm', label: 'col.sm', num: true },
  { key: 'cpu', label: 'col.cpu', num: true },
  { key: 'dataWait', label: 'col.dataWait', num: true },
];

/** A device as a chip: its text, its kind (for the colour) and the document's name for it. */
export function chip(dev) {
  return { text: deviceText(dev), kind: deviceKind(dev), device: present(dev) ? String(dev) : null };
}

function modelLabel(m, lang) {
  return [
    m.name,
    isNum(m.param_count) ? t(lang, 'model.params', { n: fmtCount(m.param_count) }) : null,
    isNum(m.forward_rate_hz) ? t(lang, 'model.rate', { n: fmtRate(m.forward_rate_hz) }) : null,
    isNum(m.step_rate_hz) ? t(lang, 'model.steps', { n: fmtRate(m.step_rate_hz) }) : null,
  ].filter(Boolean).join(' · ');
}

function processCell(p, lang) {
  return {
    name: p.name || NA,
    pid: isNum(p.pid) ? String(p.pid) : NA,
    exited: p.exited ? { text: t(lang, 'proc.exited'), title: t(lang, 'proc.exitedTitle') } : null,
    cmd: cmdText(p.cmdline) || null,
    probeError: p.probe_error ? t(lang, 'probe.error', { error: p.probe_error }) : null,
  };
}

function gpuMemCell(p, lang) {
  const rows = list(p.gpu);
  const mem = rows.reduce((a, g) => (isNum(g.mem_used_mib) ? (a ?? 0) + g.mem_used_mib : a), null);
  const title = rows.map((g) => `${t(lang, 'chart.gpuN', { n: g.index })}: ${fmtMiB(g.mem_used_mib)}`).join('\n');
  return { text: fmtMiB(mem), title, na: mem === null };
}

function dataWaitCell(p, lang) {
  const w = dataWait(p, lang);
  if (!w) return { value: NA, window: null, source: null, flag: null, na: true };
  return { value: w.value, window: w.window || null, source: w.source, flag: w.fraction >= DATA_WAIT_HIGH_FRACTION ? 'high' : null, na: false };
}

/** One process of the document as the process table's cells. */
export function processRow(doc, proc, lang) {
  const p = proc || {};
  const probed = p.has_probe === true;
  const models = list(p.models);
  const inputs = [...new Set(models.map((m) => m.input_device).filter(present).map(String))];
  const sm = smText(p, lang);
  const cpu = fmtPct(p.cpu_pct);
  return {
    pid: p.pid,
    ppid: isNum(p.ppid) ? p.ppid : null,
    role: p.role || '',
    probed,
    exited: !!p.exited,
    cells: {
      process: processCell(p, lang),
      role: probed ? { text: roleText(p, lang), probed, title: null } : { text: t(lang, 'probe.none'), probed, title: t(lang, 'probe.noneTitle') },
      models: { items: models.map((m) => ({ device: chip(m.device), label: modelLabel(m, lang) })), na: !models.length },
      inputs: { items: inputs.map(chip), na: !inputs.length },
      gpuMem: gpuMemCell(p, lang),
      sm: { text: sm, na: sm === NA },
      cpu: { text: cpu, na: cpu === NA },
      dataWait: dataWaitCell(p, lang),
    },
  };
}

/** Processes in tree order: each under its parent (when the parent is listed), siblings by pid. */
function treeOrder(procs) {
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  const kids = new Map();
  const roots = [];
  for (const p of procs) {
    if (present(p.ppid) && byPid.has(p.ppid) && p.ppid !== p.pid) {
      if (!kids.has(p.ppid)) kids.set(p.ppid, []);
      kids.get(p.ppid).push(p);
    } else roots.push(p);
  }
  const out = [];
  const seen = new Set();
  const walk = (p, depth, last) => {
    if (seen.has(p.pid)) return;
    seen.add(p.pid);
    out.push({ p, depth, last });
    const ch = (kids.get(p.pid) || []).sort((a, b) => a.pid - b.pid);
    ch.forEach((c, i) => walk(c, depth + 1, i === ch.length - 1));
  };
  roots.sort((a, b) => a.pid - b.pid).forEach((r) => walk(r, 0, true));
  return out;
}

export function processRows(doc, lang) {
  const procs = list(doc && doc.processes);
  return treeOrder(procs).map(({ p, depth, last }) => ({
    ...processRow(doc, p, lang), depth, branch: depth ? (last ? '└─' : '├─') : null,
  }));
}

// ------------------------------------------------------------------ GPU cards

/** The framework indices of the GPUs the job's models are on (the document's model device and every model's). */
function modelCudaIndices(doc) {
  const set = new Set();
  const add = (dev) => {
    const m = /^cuda:(\d+)$/.exec(String(dev || ''));
    if (m) set.add(Number(m[1]));
  };
  add(doc && doc.model_device);
  for (const p of list(doc && doc.processes)) {
    for (const mdl of list(p.models)) {
      add(mdl.device);
      for (const d of Array.isArray(mdl.devices) ? mdl.devices : []) add(d);
    }
  }
  return set;
}

function gpuTag(doc, g, modelHere, lang) {
  if (modelHere) return { kind: 'model', text: t(lang, 'gpu.modelHere') };
  if (g.vendor && g.vendor !== 'nvidia') return null; // AMD and Intel: no CUDA visibility is read for them
  const key = gpuFrameworkKey(doc, g);
  return key === 'gpu.frameworkHidden' || key === 'gpu.frameworkNotSeen' ? { kind: 'off', text: t(lang, 'gpu.hiddenTag') } : null;
}

/** The memory meter's words: used of total; where an AMD or Intel GPU's driver tells no use (an
 * i915 iGPU has no memory of its own, a suspended card is not woken to ask), that said, never a bare n/a. */
function memMeterText(g, lang) {
  if (isNum(g.mem_used_mib) || !g.vendor || g.vendor === 'nvidia') return memOfText(g, lang);
  return isNum(g.mem_total_mib)
    ? t(lang, 'gpu.mem.unknownOf', { total: fmtMiB(g.mem_total_mib) })
    : t(lang, 'gpu.mem.none', { driver: g.driver || NA });
}

export function gpuMeters(g, lang) {
  const level = utilLevel(g.util_pct);
  return [
    { key: 'util', label: t(lang, 'gpu.util'), pct: isNum(g.util_pct) ? g.util_pct : null, value: utilText(g, lang), color: UTIL_COLORS[level] },
    { key: 'mem', label: t(lang, 'gpu.mem'), pct: gpuMemPct(g), value: memMeterText(g, lang), color: MEM_METER_COLOR },
  ];
}

/** A process's utilisation on an AMD or Intel GPU: its busiest engine's, else why it cannot be told
 * (the row's unknown_reason); '' on NVIDIA's (the card's meters say it). */
function procUtilText(g, rows, lang) {
  if (!g || !g.vendor || g.vendor === 'nvidia') return '';
  const known = rows.filter((u) => isNum(u.sm_util_pct));
  if (known.length) return fmtPct(known.reduce((a, u) => a + u.sm_util_pct, 0));
  const why = rows.map((u) => u.unknown_reason).find(Boolean);
  return why ? t(lang, `gpu.unknown.${why}`) : '';
}

/** The job's processes on GPU `g`, each once, with its memory there (over its MIG instances too). */
function gpuProcs(doc, g, lang) {
  const out = [];
  for (const p of list(doc && doc.processes)) {
    const rows = list(p.gpu).filter((u) => u.index === g.index);
    if (!rows.length) continue;
    const mem = rows.reduce((a, u) => (isNum(u.mem_used_mib) ? (a ?? 0) + u.mem_used_mib : a), null);
    const util = procUtilText(g, rows, lang); // AMD and Intel only: NVIDIA's rows are as they were
    out.push({ pid: p.pid, role: roleText(p, lang), mem: fmtMiB(mem), ...(util ? { util } : {}) });
  }
  return out;
}

/** Who else uses an AMD or Intel GPU, by name ("Also used by Xorg, firefox"); null on NVIDIA's,
 * whose other processes are not named, and where they were not read. */
function gpuOthersText(g, lang) {
  const names = Array.isArray(g.other_process_names) ? g.other_process_names.map(String) : null;
  if (!names) return null;
  if (!names.length) return isNum(g.other_process_count) ? t(lang, 'gpu.usedByNone') : null;
  const more = isNum(g.other_process_names_omitted) ? g.other_process_names_omitted : 0;
  const listed = names.join(', ');
  return t(lang, 'gpu.usedBy', { names: more > 0 ? t(lang, 'gpu.usedByMore', { names: listed, n: more }) : listed });
}

export function gpuCard(doc, gpu, lang) {
  const g = gpu || {};
  const nvidia = !g.vendor || g.vendor === 'nvidia';
  // An AMD or Intel GPU is also the model's when the verdict mapped it there (a model on xpu:0 has no
  // framework_index: that is CUDA's numbering)
  const modelHere = (isNum(g.framework_index) && modelCudaIndices(doc).has(g.framework_index))
    || (!nvidia && isNum(g.index) && doc && doc.model_gpu_index === g.index);
  const mig = migRows(doc, g, lang);
  const vendor = vendorName(g);
  return {
    index: isNum(g.index) ? g.index : null,
    vendor,
    title: nvidia ? t(lang, 'chart.gpuN', { n: g.index ?? NA }) : t(lang, 'gpu.vendorN', { n: g.index ?? NA, vendor }),
    name: g.name || NA,
    nameTitle: [g.name, g.uuid, g.pci_bus_id].filter(Boolean).join('\n'),
    modelHere,
    tag: gpuTag(doc, g, modelHere, lang),
    // AMD and Intel: where their figures come from (the device's: sysfs; per process: DRM and KFD)
    framework: nvidia ? gpuFrameworkText(doc, g, lang) : t(lang, 'gpu.vendorNote', { driver: g.driver || NA, pci: g.pci_bus_id || NA }),
    utilLevel: utilLevel(g.util_pct),
    meters: gpuMeters(g, lang),
    procsTitle: t(lang, 'gpu.procs'),
    procs: gpuProcs(doc, g, lang),
    noProcs: t(lang, 'gpu.noProcs'),
    others: gpuOthersText(g, lang), // AMD and Intel: who else uses it
    mig: mig.length ? { title: t(lang, 'eff.mig.title'), rows: mig.map((r) => ({ ...r, pidsText: r.pids.map((pid) => t(lang, 'events.pid', { pid })).join(', ') })) } : null,
  };
}

export function igpuCard(s, lang) {
  return {
    pci: s.pci || '',
    vendor: s.vendor || NA,
    name: s.name || NA,
    badge: t(lang, 'igpu.badge'),
    note: t(lang, 'igpu.note'),
    meta: [s.pci && t(lang, 'igpu.pci', { pci: s.pci }), s.driver && t(lang, 'igpu.driver', { driver: s.driver })].filter(Boolean).join(' · '),
  };
}

export function gpuCards(doc, lang) {
  const gpus = list(doc && doc.gpus);
  const nv = (doc && doc.nvml) || {};
  return {
    cards: gpus.map((g) => gpuCard(doc, g, lang)),
    unusable: unusableGpus(doc).map((s) => igpuCard(s, lang)),
    none: gpus.length ? null : { text: t(lang, 'gpus.none'), error: nv.ok === false && nv.error ? t(lang, 'runtime.nvmlError', { error: nv.error }) : null },
  };
}

// ------------------------------------------------------------------ summary facts and runtime footer

export function heroFacts(doc, lang) {
  const gpu = modelGpu(doc);
  const d = doc || {};
  return [
    { key: 'model-device', label: t(lang, 'summary.modelDevice'), text: deviceText(d.model_device), chip: chip(d.model_device) },
    { key: 'input-device', label: t(lang, 'summary.inputDevice'), text: deviceText(d.input_device), chip: chip(d.input_device) },
    { key: 'util', label: t(lang, 'summary.util'), text: utilText(gpu, lang), chip: null },
    { key: 'mem', label: t(lang, 'summary.mem'), text: fmtMiB(gpu && gpu.mem_used_mib), chip: null },
    { key: 'cuda', label: t(lang, 'summary.cuda'), text: cudaText(d.runtime || {}, lang), chip: null },
    ...(d.distributed ? [{ key: 'run', label: t(lang, 'summary.run'), text: runText(d.distributed, lang), chip: null }] : []),
    ...(d.pod ? [{ key: 'pod', label: t(lang, 'summary.pod'), text: podText(d.pod, lang), chip: null, title: podTitle(d.pod, lang) }] : []),
  ];
}

/** Ascending ranks as ranges: [0, 1, 2, 5] -> "0–2, 5". */
export function rankRanges(ranks) {
  const out = [];
  // Not list(): rank 0 is falsy.
  const sorted = [...new Set(Array.isArray(ranks) ? ranks.filter(isNum) : [])].sort((a, b) => a - b);
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r === last[1] + 1) last[1] = r;
    else out.push([r, r]);
  }
  return out.map(([a, b]) => (a === b ? String(a) : `${a}–${b}`)).join(', ');
}

/** A job's distributed run in one line: its key (and where the key comes from), this node, its ranks here. */
export function runText(run, lang) {
  const ranks = rankRanges(run.ranks);
  return [
    present(run.job_key) ? t(lang, 'run.key', { key: run.job_key, source: run.job_key_source || NA }) : null,
    isNum(run.node_rank) ? t(lang, 'run.node', { n: run.node_rank }) : null,
    ranks && isNum(run.world_size) ? t(lang, 'run.ranksOf', { ranks, n: run.world_size }) : null,
    ranks && !isNum(run.world_size) ? t(lang, 'run.ranks', { ranks }) : null,
    !ranks && isNum(run.world_size) ? t(lang, 'run.world', { n: run.world_size }) : null,
    isNum(run.restart_count) && run.restart_count > 0 ? t(lang, 'run.restarts', { n: run.restart_count }) : null,
  ].filter(Boolean).join(' · ') || NA;
}

// A container id as `docker ps` and `crictl ps` show it: its first 12 hex digits.
export const CONTAINER_ID_SHORT_CHARS = 12;

/**
 * A job's pod in one line: namespace/name · container (its name, and its short id from the cgroup),
 * or its UID when nothing named it. A name the process gave itself (source `self-reported`: its
 * environment, its hostname) is shown as its claim, never as the kubelet's.
 */
export function podText(pod, lang) {
  const named = present(pod.pod) ? (present(pod.namespace) ? `${pod.namespace}/${pod.pod}` : pod.pod) : null;
  const name = named === null ? t(lang, 'pod.unnamed', { uid: pod.uid || NA })
    : pod.source === 'self-reported' ? t(lang, 'pod.selfReported', { name: named }) : named;
  const id = present(pod.container_id) ? String(pod.container_id).slice(0, CONTAINER_ID_SHORT_CHARS) : null;
  const container = present(pod.container)
    ? (id ? t(lang, 'pod.containerNamed', { name: pod.container, id }) : t(lang, 'pod.container', { name: pod.container }))
    : (id ? t(lang, 'pod.container', { name: id }) : null);
  return [name, container].filter(Boolean).join(' · ');
}

/** The pod's full UID and container id, for the title of the line podText makes; null without an id. */
export function podTitle(pod, lang) {
  return present(pod.container_id) ? t(lang, 'pod.title', { uid: pod.uid || NA, id: pod.container_id }) : null;
}

export function runtimeFacts(doc, lang) {
  const rt = (doc && doc.runtime) || {};
  const nv = (doc && doc.nvml) || {};
  const item = (key, label, value, bad = false) => ({ key, label: t(lang, label), value: present(value) ? String(value) : NA, bad });
  const noCuda = !!rt.torch && !rt.cuda_build;
  return {
    items: [
      item('torch', 'runtime.torch', rt.torch),
      item('cuda-build', 'runtime.cudaBuild', noCuda ? t(lang, 'runtime.cudaBuildNone') : rt.cuda_build, noCuda),
      item('cudnn', 'runtime.cudnn', rt.cudnn),
      item('visible', 'runtime.visible', rt.cuda_visible_devices === null || rt.cuda_visible_devices === undefined ? null : `"${rt.cuda_visible_devices}"`),
      item('driver', 'runtime.driver', nv.driver),
      item('cuda-driver', 'runtime.cudaDriver', nv.cuda_driver),
    ],
    error: nv.ok === false && nv.error ? t(lang, 'runtime.nvmlError', { error: nv.error }) : null,
    interval: isNum(doc && doc.interval_s) ? t(lang, 'runtime.interval', { s: doc.interval_s }) : null,
  };
}

// ------------------------------------------------------------------ cluster view (a ClusterDocument)

export const CLUSTER_NODE_COLUMNS = [
  { key: 'node', label: 'col.node', num: false },
  { key: 'state', label: 'col.state', num: false },
  { key: 'gpu', label: 'col.gpu', num: true },
  { key: 'util', label: 'col.util', num: true },
  { key: 'mem', label: 'col.gpuMem', num: true },
  { key: 'clock', label: 'col.smClock', num: true },
  { key: 'sm', label: 'col.smActivity', num: true },
  { key: 'slowedBy', label: 'col.slowedBy', num: false },
];

export const CLUSTER_RANK_COLUMNS = [
  { key: 'rank', label: 'col.rank', num: true },
  { key: 'node', label: 'col.node', num: false },
  { key: 'gpus', label: 'col.gpus', num: false },
  { key: 'rate', label: 'col.fwdRate', num: true },
  { key: 'dataWait', label: 'col.dataWait', num: true },
  { key: 'forward', label: 'col.forward', num: true },
  { key: 'optimizer', label: 'col.optimizer', num: true },
  { key: 'other', label: 'col.other', num: true },
  { key: 'collectiveWait', label: 'col.collectiveWait', num: true },
];

const textCell = (text) => ({ text, na: text === NA });

// The nodes' columns: the clock column is "SM clock" (NVIDIA's word) unless an AMD or Intel GPU is
// listed, whose clock is its GPU clock.
export function clusterNodeColumns(cluster) {
  const others = list(cluster && cluster.nodes).some((n) => list(n.gpus).some((g) => g.vendor === 'amd' || g.vendor === 'intel'));
  return others ? CLUSTER_NODE_COLUMNS.map((c) => (c.key === 'clock' ? { ...c, label: 'col.gpuClock' } : c)) : CLUSTER_NODE_COLUMNS;
}

function nodeState(n, lang) {
  if (n.reporting) return { text: t(lang, 'cluster.reporting'), flag: null, title: null };
  const why = ['down', 'gone', 'stale'].includes(n.why) ? n.why : 'gone';
  return { text: t(lang, `cluster.missing.${why}`), flag: 'missing', title: t(lang, 'cluster.pollAge', { ago: fmtAgo(n.poll_age_s, lang) }) };
}

function clusterGpuCells(g, lang) {
  const reasons = list(g.clock_events).map((name) => ({ name, kind: reasonKind(name), label: t(lang, `clock-reason.${name}`) }));
  return {
    gpu: textCell(isNum(g.index) ? String(g.index) : NA),
    util: { ...textCell(fmtPct(g.util_pct)), level: utilLevel(g.util_pct) },
    mem: textCell(isNum(g.mem_used_mib) ? memOfText(g, lang) : NA),
    clock: textCell(isNum(g.sm_clock_mhz) ? t(lang, 'eff.clock.now', { now: String(Math.round(g.sm_clock_mhz)) }) : NA),
    sm: textCell(fmtFraction(g.sm_activity_fraction)),
    slowedBy: { items: reasons, text: reasons.map((r) => r.label).join(', ') || NA, na: !reasons.length },
  };
}

export function clusterNodeRows(cluster, lang) {
  const rows = [];
  for (const n of list(cluster && cluster.nodes)) {
    const head = { node: { text: n.node || NA }, state: nodeState(n, lang) };
    const gpus = list(n.gpus);
    const empty = { gpu: textCell(NA), util: { ...textCell(NA), level: null }, mem: textCell(NA), clock: textCell(NA), sm: textCell(NA), slowedBy: { items: [], text: NA, na: true } };
    (gpus.length ? gpus : [null]).forEach((g, i) => rows.push({
      node: n.node, first: i === 0, reporting: n.reporting === true, cells: { ...head, ...(g ? clusterGpuCells(g, lang) : empty) },
    }));
  }
  return rows;
}

export function clusterRankRows(job, lang) {
  return list(job && job.ranks).slice().sort((a, b) => a.rank - b.rank).map((r) => {
    const wait = fmtFraction(r.data_wait_fraction);
    return {
      rank: r.rank,
      node: r.node,
      cells: {
        rank: textCell(isNum(r.rank) ? String(r.rank) : NA),
        node: textCell(r.node || NA),
        gpus: textCell(Array.isArray(r.gpus) && r.gpus.length ? r.gpus.join(', ') : NA),
        rate: textCell(isNum(r.forward_rate_per_s) ? t(lang, 'model.rate', { n: fmtRate(r.forward_rate_per_s) }) : NA),
        dataWait: { ...textCell(wait), flag: isNum(r.data_wait_fraction) && r.data_wait_fraction >= DATA_WAIT_HIGH_FRACTION ? 'high' : null },
        forward: textCell(fmtFraction(r.forward_fraction)),
        optimizer: textCell(fmtFraction(r.optimizer_fraction)),
        other: textCell(fmtFraction(r.other_fraction)),
        // Its wait in the collectives for the slowest rank: about 0 on the rank the others wait for.
        collectiveWait: textCell(fmtFraction(r.collective_wait_fraction)),
      },
    };
  });
}

function clusterWarnings(ws, lang) {
  return sortWarnings(ws).map((w) => ({ code: w.code, severity: t(lang, `severity.${severityOf(w)}`), sev: severityOf(w), message: warningMessage(w, lang), hint: warningHint(w, lang) || null }));
}

export function isDistributed(run) {
  // Not list(): rank 0 is falsy.
  return Boolean(run) && ((isNum(run.world_size) && run.world_size > 1) || (Array.isArray(run.ranks) && run.ranks.length > 1));
}

export function clusterView(cluster, statusDoc, lang) {
  const c = cluster || {};
  const run = statusDoc && statusDoc.distributed ? statusDoc.distributed : null;
  const distributed = isDistributed(run);
  const others = isNum(c.undistributed_jobs) ? c.undistributed_jobs : 0;
  const key = run ? run.job_key : null;
  const all = list(c.jobs);
  // A job key is anyone's to set (TORCHELASTIC_RUN_ID): the run is its key with its owner's uid, so
  // another user's job under the same key is never shown as this one (a side without a uid: an
  // older sidecar, matched by the key alone).
  const owner = (j) => !run || !isNum(run.uid) || !isNum(j.uid) || j.uid === run.uid;
  const mine = present(key) ? all.filter((j) => j.job_key === key && owner(j)) : [];
  const jobs = (mine.length ? mine : all).map((j) => ({
    key: j.job_key,
    title: t(lang, 'cluster.job', { job: j.job_key, status: present(j.status) ? t(lang, `status.${j.status}`) : NA }),
    status: j.status || null,
    detail: t(lang, 'cluster.jobRanks', { seen: list(j.ranks).length, world: isNum(j.world_size) ? j.world_size : NA, nodes: list(j.nodes).join(', ') || NA }),
    warnings: clusterWarnings(j.warnings, lang),
    ranks: clusterRankRows(j, lang),
  }));
  return {
    summary: t(lang, 'cluster.summary', { nodes: list(c.nodes).length, jobs: all.length, prometheus: c.prometheus || NA }),
    nodes: clusterNodeRows(c, lang),
    nodeColumns: clusterNodeColumns(c),
    warnings: clusterWarnings(c.warnings, lang),
    jobs,
    matched: mine.length > 0,
    distributed,
    line: distributed ? null : t(lang, 'cluster.line', { nodes: list(c.nodes).length, jobs: all.length, prometheus: c.prometheus || NA }),
    undistributed: others > 0 ? t(lang, 'cluster.undistributed', { n: others }) : null,
  };
}

// ------------------------------------------------------------------ job lists

const isLive = (j) => j.alive !== false;
// The viewer's own job (Job.yours: null when the sidecar cannot tell whose request it answers).
const isYours = (j) => j.yours === true;
// A job whose start (or end) is unknown sorts after those whose is known.
const startOf = (j) => (isNum(j.start_time_unix_s) ? j.start_time_unix_s : -Infinity);
const endOf = (j) => (isNum(j.ended_unix_s) ? j.ended_unix_s : startOf(j));
const newestBy = (at) => (a, b) => {
  const x = at(a);
  const y = at(b);
  return x > y ? -1 : x < y ? 1 : 0;
};

export function orderJobs(jobs) {
  const all = list(jobs).filter((j) => typeof j === 'object');
  return {
    live: all.filter(isLive).sort((a, b) => isYours(b) - isYours(a) || newestBy(startOf)(a, b)),
    exited: all.filter((j) => !isLive(j)).sort(newestBy(endOf)),
  };
}

export function jobRow(job, lang) {
  return {
    id: job.id,
    status: statusOf(job),
    alive: isLive(job),
    pid: isNum(job.root_pid) ? String(job.root_pid) : NA,
    cmd: cmdText(job.command),
    user: present(job.user) ? String(job.user) : null,
    exited: isLive(job) ? null : t(lang, 'jobs.exited'),
    message: messageText(job, lang) || '',
  };
}

export function jobList(jobs, lang, shown = null) {
  const { live, exited } = orderJobs(jobs);
  const row = (j) => ({ ...jobRow(j, lang), shown: j.id === shown });
  return {
    live: live.map(row),
    exited: exited.map(row),
    exitedLabel: exited.length ? t(lang, 'jobs.exitedCount', { n: exited.length }) : null,
    exitedOpen: exited.some((j) => j.id === shown),
  };
}

export function defaultJobId(...groups) {
  const ordered = groups.map(orderJobs);
  const first = ordered.find((g) => g.live.length) || ordered.find((g) => g.exited.length);
  return first ? (first.live[0] || first.exited[0]).id : null;
}
