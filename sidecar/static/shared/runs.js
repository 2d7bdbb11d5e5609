/**
 * runs.js — the Runs view's cells, shared by the standalone page (page/runs.js) and the DSH plugin's
 * GPU tab (dsh_plugin/src/client/runs.jsx): the run ledger's documents (issue 40; docs/api.md
 * RunsDocument, RunDocument, CompareDocument) as rows, a run's timeline and per-minute chart data,
 * and a comparison's outcome and ranked causes, every text from the catalogue in `lang`. Pure: no
 * DOM, no fetch.
 *
 *   RUNS_URL, RUN_URL, COMPARE_URL   the sidecar's routes (relative, as the page asks them)
 *   RUN_COLUMNS             the list's columns: {key, label (a catalogue id), num}
 *   runRows(doc, lang)      the runs of a RunsDocument, the newest start first, each {id, state, status, cells}
 *   runTimeline(doc, lang)  a RunDocument's verdict changes, oldest first: {time, status, statusText, warnings}
 *   runChartData(doc, tr)   its minutes as charts.js TimeChart data: {rate, util} (null without minutes)
 *   compareView(doc, lang)  a CompareDocument: headline, the two figures, the causes ranked with their
 *                           shares and evidence, the reasons by share, the notes
 *   notRecorded(lang)       the text of a sidecar that keeps no runs (its /runs answers 404)
 */

import { NA, cmdText, fmtDuration, fmtRate, renderRef, statusOf, t } from './format.js';
import { niceTicks } from './charts.js';

/** @typedef {import('./contract.js').RunsDocument} RunsDocument */
/** @typedef {import('./contract.js').RunDocument} RunDocument */
/** @typedef {import('./contract.js').CompareDocument} CompareDocument */

export const RUNS_URL = 'api/dsh-gpu-dashboard/runs';
export const RUN_URL = (id) => `api/dsh-gpu-dashboard/runs/${encodeURIComponent(id)}`;
export const COMPARE_URL = (a, b = null) =>
  `api/dsh-gpu-dashboard/compare?a=${encodeURIComponent(a)}${b ? `&b=${encodeURIComponent(b)}` : ''}`;

export const COMMAND_MAX_CHARS = 60;
export const FOLDER_MAX_CHARS = 40;
const S_PER_H = 3600;

export const RUN_COLUMNS = [
  { key: 'start', label: 'runs.col.start' },
  { key: 'duration', label: 'runs.col.duration', num: true },
  { key: 'state', label: 'runs.col.state' },
  { key: 'command', label: 'runs.col.command' },
  { key: 'folder', label: 'runs.col.folder' },
  { key: 'status', label: 'runs.col.status' },
  { key: 'rate', label: 'runs.col.rate', num: true },
  { key: 'held', label: 'runs.col.held', num: true },
  { key: 'busy', label: 'runs.col.busy', num: true },
];

const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const pad2 = (n) => String(n).padStart(2, '0');

// A user's command or folder may carry control characters, line breaks and bidi overrides (the
// ledger's text is input): shown as one plain line.
const STEERING = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
export function plainLine(text) {
  return String(text ?? '').replace(STEERING, ' ');
}

/** `text` cut to `max` characters: the end kept (`…` first) for a folder, the start for a command. */
export function clip(text, max, keepEnd = false) {
  const s = plainLine(text);
  if (s.length <= max) return s;
  return keepEnd ? `…${s.slice(s.length - max + 1)}` : `${s.slice(0, max - 1)}…`;
}

/** A date and time, local: 2026-12-06 18:03. */
export function fmtStart(unix) {
  if (!isNum(unix)) return NA;
  const d = new Date(unix * 1000);
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
}

/** GPU-seconds as GPU-hours. */
export function fmtGpuHours(seconds, lang) {
  if (!isNum(seconds)) return NA;
  const h = seconds / S_PER_H;
  return t(lang, 'runs.gpuHours', { value: h < 10 ? h.toFixed(2) : h.toFixed(1) });
}

/** A text of a document: its reference in `lang`, else its English, else "". */
export function refText(obj, lang, field = 'text') {
  if (!obj) return '';
  const rendered = renderRef(obj[`${field}_ref`], lang);
  if (rendered !== null && rendered.trim()) return rendered;
  return typeof obj[field] === 'string' ? obj[field] : '';
}

function warningsText(codes, lang) {
  const list = Array.isArray(codes) ? codes.filter((c) => typeof c === 'string') : [];
  return list.length ? t(lang, 'runs.warnings', { codes: list.map(plainLine).join(', ') }) : '';
}

/** One run of a RunsDocument as the list shows it. */
export function runRow(run, lang) {
  const status = run.status ? statusOf(run) : null;
  const warnings = warningsText(run.warnings, lang);
  const command = plainLine(cmdText(run.command));
  const busyShare = isNum(run.gpu_busy_s) && run.gpu_held_s > 0 ? run.gpu_busy_s / run.gpu_held_s : null;
  return {
    id: plainLine(run.id),
    state: run.state === 'live' ? 'live' : 'exited',
    status,
    warnings: Array.isArray(run.warnings) ? run.warnings.length : 0,
    cells: {
      start: { text: fmtStart(run.started_unix_s) },
      duration: { text: fmtDuration(run.wall_s) },
      state: { text: t(lang, run.state === 'live' ? 'runs.state.live' : 'runs.state.exited', { code: run.exit_code ?? NA }) },
      command: { text: clip(command, COMMAND_MAX_CHARS) || NA, title: command },
      folder: { text: run.cwd ? clip(run.cwd, FOLDER_MAX_CHARS, true) : NA, title: plainLine(run.cwd) },
      status: { text: [status ? t(lang, `status.${status}`) : NA, warnings].filter(Boolean).join(' · '), title: warnings },
      rate: { text: isNum(run.step_rate_hz) ? t(lang, 'runs.rate', { value: fmtRate(run.step_rate_hz) }) : NA },
      held: { text: fmtGpuHours(run.gpu_held_s, lang) },
      busy: {
        text: fmtGpuHours(run.gpu_busy_s, lang),
        title: busyShare === null ? '' : t(lang, 'runs.busyShare', { share: `${Math.round(busyShare * 100)} %` }),
      },
    },
  };
}

/** @param {RunsDocument|null} doc */
export function runRows(doc, lang) {
  const runs = doc && Array.isArray(doc.runs) ? doc.runs.filter((r) => r && typeof r === 'object' && typeof r.id === 'string') : [];
  return runs
    .map((run, i) => ({ run, i }))
    .sort((a, b) => (b.run.started_unix_s || 0) - (a.run.started_unix_s || 0) || a.i - b.i)
    .map(({ run }) => runRow(run, lang));
}

/** @param {RunDocument|null} doc */
export function runTimeline(doc, lang) {
  const list = doc && Array.isArray(doc.timeline) ? doc.timeline : [];
  return list.filter((c) => c && isNum(c.time_unix_s)).map((c) => ({
    time: fmtStart(c.time_unix_s),
    status: statusOf(c),
    statusText: t(lang, `status.${statusOf(c)}`),
    warnings: warningsText(c.warnings, lang) || t(lang, 'runs.noWarnings'),
  }));
}

/** A RunDocument's facts beside its timeline: setup and totals, each {key, label, text}. */
export function runFacts(doc, lang) {
  const run = (doc && doc.run) || {};
  const setup = (doc && doc.setup) || {};
  const loader = Array.isArray(setup.loader) ? setup.loader.map((s) => `${plainLine(s.name)}=${plainLine(s.value)}`).join(', ') : '';
  const facts = [
    ['command', plainLine(cmdText(run.command))],
    ['folder', plainLine(run.cwd)],
    ['host', plainLine(run.host)],
    ['gpus', Array.isArray(run.gpu_models) ? [...new Set(run.gpu_models.map(plainLine))].join(', ') : ''],
    ['torch', plainLine(setup.torch_version)],
    ['precision', plainLine(setup.precision)],
    ['loader', loader],
    ['steps', isNum(run.steps) ? String(run.steps) : ''],
  ];
  return facts.map(([key, text]) => ({ key, label: t(lang, `runs.fact.${key}`), text: text || NA }));
}

/** Points [[time, value], ...] of the minutes' `field` (each minute at its middle). */
function minutePoints(minutes, field, scale = 1) {
  return minutes.filter((m) => isNum(m[field]) && isNum(m.start_unix_s))
    .map((m) => [m.start_unix_s + (isNum(m.span_s) ? m.span_s : 60) / 2, m[field] * scale]);
}

/**
 * Charts of a run's minutes (charts.js TimeChart data): steps/s, and GPU utilisation with SM activity.
 * @param {RunDocument|null} doc
 * @param {(key: string, vars?: object) => string} tr
 */
export function runChartData(doc, tr) {
  const minutes = doc && Array.isArray(doc.minutes) ? doc.minutes.filter((m) => m && typeof m === 'object') : [];
  if (!minutes.length) return null;
  const t0 = Math.min(...minutes.map((m) => m.start_unix_s));
  const t1 = Math.max(...minutes.map((m) => m.start_unix_s + (isNum(m.span_s) ? m.span_s : 60)));
  const rate = [{ key: 'rate', label: tr('runs.chart.rateSeries'), color: '#2563eb', points: minutePoints(minutes, 'step_rate_hz') }];
  const util = [
    { key: 'util', label: tr('runs.chart.utilSeries'), color: '#16a34a', points: minutePoints(minutes, 'gpu_util_pct') },
    { key: 'sm', label: tr('runs.chart.smSeries'), color: '#9333ea', points: minutePoints(minutes, 'sm_activity_fraction', 100) },
  ].filter((s) => s.points.length);
  const top = (series) => Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const rateTicks = niceTicks(Math.max(top(rate) * 1.15, 1), 4);
  const utilTicks = niceTicks(100, 4);
  // a minute is one point: the line is broken only where a minute is missing
  const gapS = 150;
  return {
    t0, t1, gapS,
    rate: { series: rate, yMax: rateTicks.max, yTicks: rateTicks.ticks },
    util: { series: util, yMax: utilTicks.max, yTicks: utilTicks.ticks },
  };
}

/** @param {CompareDocument|null} doc */
export function compareView(doc, lang) {
  if (!doc || typeof doc !== 'object') return null;
  const figure = (f) => (f && typeof f === 'object' ? { figure: f.figure, outcome: f.outcome, text: refText(f, lang) } : null);
  const causes = (Array.isArray(doc.causes) ? doc.causes : [])
    .filter((c) => c && typeof c === 'object')
    .sort((a, b) => (b.share_fraction || 0) - (a.share_fraction || 0))
    .map((c) => ({
      code: c.code,
      name: t(lang, `runs.part.${c.code}`),
      share: isNum(c.share_fraction) ? `${Math.round(c.share_fraction * 100)} %` : NA,
      shareFraction: isNum(c.share_fraction) ? c.share_fraction : 0,
      text: refText(c, lang),
      reasons: (Array.isArray(c.reasons) ? c.reasons : []).map((r) => ({ code: r.code, text: refText(r, lang) })),
    }));
  return {
    outcome: typeof doc.outcome === 'string' ? doc.outcome : 'not-comparable',
    outcomeText: t(lang, `runs.outcome.${doc.outcome}`),
    headline: refText(doc, lang, 'message'),
    baseline: doc.baseline ? plainLine(doc.baseline.id) : NA,
    baselineText: t(lang, doc.baseline_choice === 'previous' ? 'runs.compare.previous' : 'runs.compare.given', {
      id: doc.baseline ? plainLine(doc.baseline.id) : NA, start: fmtStart(doc.baseline && doc.baseline.started_unix_s),
    }),
    figures: [figure(doc.throughput), figure(doc.gpu_busy)].filter(Boolean),
    causes,
    reasons: (Array.isArray(doc.reasons) ? doc.reasons : []).map((r) => ({ code: r.code, text: refText(r, lang) })),
    notes: (Array.isArray(doc.notes) ? doc.notes : []).map((n) => ({ code: n.code, text: refText(n, lang) })),
  };
}

/** A sidecar that keeps no runs (404 from /runs): what it means and how to turn them on. */
export function notRecorded(lang) {
  return { title: t(lang, 'runs.off.title'), body: t(lang, 'runs.off.body'), more: t(lang, 'runs.off.more') };
}

/** The runs routes' refusals other than "no runs kept", as one line (`compare`: a comparison's: no previous run, ...). */
export function runsError(error, lang, compare = false) {
  return t(lang, compare ? 'runs.compare.error' : 'runs.error', { error: plainLine(error && error.message ? error.message : error) });
}
