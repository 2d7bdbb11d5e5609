// The Runs view (issue 40): the shared cells (sidecar/static/shared/runs.js) the page's Runs view
// and the plugin's GPU tab lay out, the host's session filter and routes (host/jobs.js sessionRuns,
// host/core.js resolveRoute), and the plugin's table and comparison (src/client/runs.jsx) rendered
// without React (test/jsx-shim.mjs). The documents are built here, field by field as docs/api.md
// declares them.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { render } from './jsx-shim.mjs'
import {
  COMPARE_URL, RUN_COLUMNS, RUN_URL, clip, compareView, fmtGpuHours, notRecorded, plainLine, runChartData, runRows, runTimeline,
} from '../../sidecar/static/shared/runs.js'
import { sessionRuns } from '../host/jobs.js'
import { sessionRunsAnswer } from '../host/autostart.js'
import { resolveRoute } from '../host/core.js'

const here = dirname(fileURLToPath(import.meta.url))
const T0 = 1_796_000_400

const run = (over = {}) => ({
  id: 'c720995f', key: 'boot/100001-9000001', job_id: '100001-9000001', host: 'gpu-node-07', user: 'ada', uid: 1000,
  command: ['python', 'train.py'], cwd: '/home/ada/proj', started_unix_s: T0, last_seen_unix_s: T0 + 600,
  ended_unix_s: T0 + 600, state: 'exited', exit_code: 0, status: 'GPU', warnings: [], wall_s: 600, steps: 2400,
  step_rate_hz: 4, gpu_held_s: 7200, gpu_busy_s: 5400, energy_j: null, gpu_mem_peak_mib: null, power_peak_w: null,
  temperature_peak_c: null, gpu_models: ['NVIDIA H100'], distributed_key: null, world_size: null, slurm_job: null, pod: null, ...over,
})
const runs = (list) => ({ schema: 2, time_unix_s: T0 + 9999, since_unix_s: null, runs: list, truncated: false, notice: null })
const ref = (id, params = {}) => ({ id, params })
const cause = (code, share, reasons = []) => ({
  code, share_fraction: share, baseline_s: 0.02, run_s: 0.2, baseline_fraction: 0.08, run_fraction: 0.5, reasons,
  text: `english ${code}`,
  text_ref: ref(`compare.cause.${code}`, { baseline: '20.0 ms', run: '200.0 ms', baseline_share: '8%', run_share: '50%', share: `${Math.round(share * 100)}%` }),
})
const figure = (name, outcome, params) => ({
  figure: name, baseline: 4, run: 2.5, change_ratio: -0.375, band_ratio: 0.02, baseline_minutes: 9, run_minutes: 9, outcome,
  text: 'english', text_ref: ref(`compare.outcome.${outcome}`, { figure: ref(`compare.figure.${name}`), ...params }),
})
const loader = { code: 'loader-settings', baseline: 'num_workers=4', run: 'num_workers=0', detail: null, text: 'english', text_ref: ref('compare.reason.loader-settings', { baseline: 'num_workers=4', run: 'num_workers=0' }) }
const comparison = () => ({
  schema: 2, run: run({ id: '8439bf4c' }), baseline: run(), baseline_choice: 'previous', outcome: 'regression',
  message: 'english headline', message_ref: ref('compare.outcome.regression', { figure: ref('compare.figure.throughput'), baseline: ref('compare.unit.steps-per-s', { value: '4' }), run: ref('compare.unit.steps-per-s', { value: '2.5' }), change: '-37.5%', band: '2.0%' }),
  throughput: figure('throughput', 'regression', { baseline: '4', run: '2.5', change: '-37.5%', band: '2.0%' }),
  gpu_busy: figure('gpu-busy', 'within-noise', { baseline: '95%', run: '95%', change: '+0.0%', band: '2.0%' }),
  baseline_step_s: 0.25, run_step_s: 0.4,
  // listed out of order: the view ranks them by share
  causes: [cause('forward', 0.1), cause('data-wait', 0.9, [loader])],
  reasons: [], comparable: true, notes: [],
})

describe('the runs list', () => {
  test('the newest start first, with the columns in order and GPU-hours from GPU-seconds', () => {
    const rows = runRows(runs([run(), run({ id: 'aaaa0001', started_unix_s: T0 + 3600, state: 'live', exit_code: null, step_rate_hz: null }), run({ id: 'aaaa0002', started_unix_s: T0 + 60 })]), 'en')
    assert.deepEqual(rows.map((r) => r.id), ['aaaa0001', 'aaaa0002', 'c720995f'])
    assert.deepEqual(RUN_COLUMNS.map((c) => c.key), ['start', 'duration', 'state', 'command', 'folder', 'status', 'rate', 'held', 'busy'])
    const c = rows[2].cells
    assert.deepEqual([c.duration.text, c.state.text, c.command.text, c.folder.text, c.status.text, c.rate.text, c.held.text, c.busy.text],
      ['10:00', 'ended (exit 0)', 'python train.py', '/home/ada/proj', 'On GPU', '4.0 steps/s', '2.00 GPU·h', '1.50 GPU·h'])
    assert.equal(c.busy.title, 'busy 75 % of the time held')
    assert.deepEqual([rows[0].state, rows[0].cells.state.text, rows[0].cells.rate.text], ['live', 'running', '—'])
    assert.equal(fmtGpuHours(36_000 * 12, 'zh'), '120.0 GPU·时')
  })
  test("a user's text is one plain line, clipped: the start of a command, the end of a folder", () => {
    const forged = 'x\u001b[2J\n- 9999 forged line\r\u202eevil\u2028'
    assert.equal(plainLine(forged), 'x [2J - 9999 forged line  evil ')
    const row = runRows(runs([run({ command: ['python', forged, 'a'.repeat(80)], cwd: `/home/ada/${'d'.repeat(60)}/proj` })]), 'en')[0]
    assert.ok(!/[\u0000-\u001f\u202e\u2028]/.test(JSON.stringify(row.cells).replace(/\\u/g, '')), 'no steering character')
    assert.equal(row.cells.command.text.length, 60)
    assert.ok(row.cells.command.text.startsWith('python x [2J') && row.cells.command.text.endsWith('…'))
    assert.ok(row.cells.folder.text.startsWith('…') && row.cells.folder.text.endsWith('/proj') && row.cells.folder.text.length === 40)
    assert.equal(clip('abc', 3), 'abc')
  })
  test('warnings are named beside the status; an empty document has no rows', () => {
    const row = runRows(runs([run({ status: 'CPU', warnings: ['data-wait', 'low-util'] })]), 'zh')[0]
    assert.equal(row.cells.status.text, '在 CPU 上 · 警告：data-wait, low-util')
    assert.deepEqual(runRows(null, 'en'), [])
    assert.deepEqual(runRows(runs([null, { id: 5 }]), 'en'), [])
  })
  test('the routes a run and a comparison are asked at, quoted', () => {
    assert.equal(RUN_URL('boot/1-2'), 'api/dsh-gpu-dashboard/runs/boot%2F1-2')
    assert.equal(COMPARE_URL('8439bf4c'), 'api/dsh-gpu-dashboard/compare?a=8439bf4c')
    assert.equal(COMPARE_URL('a&b', 'c'), 'api/dsh-gpu-dashboard/compare?a=a%26b&b=c')
  })
})

describe('one run', () => {
  const minute = (i, over = {}) => ({ start_unix_s: T0 + 60 * i, span_s: 60, minutes: 1, polls: 40, step_rate_hz: 2.5 + i / 10, gpu_util_pct: 90, sm_activity_fraction: 0.5, ...over })
  test('its timeline, oldest first, with each change of status and warnings', () => {
    const doc = { timeline: [{ time_unix_s: T0 + 5, status: 'GPU', warnings: [] }, { time_unix_s: T0 + 100, status: 'GPU', warnings: ['data-wait'] }] }
    assert.deepEqual(runTimeline(doc, 'en').map((c) => [c.status, c.statusText, c.warnings]), [['GPU', 'On GPU', 'no warnings'], ['GPU', 'On GPU', 'warnings: data-wait']])
  })
  test('its minutes charted at their middles: steps/s, GPU utilisation and SM activity in percent', () => {
    const d = runChartData({ minutes: [minute(0), minute(1, { sm_activity_fraction: null }), minute(2, { step_rate_hz: null })] }, (k) => k)
    assert.deepEqual([d.t0, d.t1], [T0, T0 + 180])
    assert.deepEqual(d.rate.series[0].points, [[T0 + 30, 2.5], [T0 + 90, 2.6]])
    assert.deepEqual(d.util.series.map((s) => [s.key, s.points.length]), [['util', 3], ['sm', 2]])
    assert.deepEqual(d.util.series[1].points[0], [T0 + 30, 50])
    assert.ok(d.rate.yMax >= 2.6 && d.util.yMax === 100)
    assert.equal(runChartData({ minutes: [] }, (k) => k), null)
  })
})

describe('a comparison', () => {
  test('the outcome, the figures and the causes ranked by share with their evidence, in English', () => {
    const vm = compareView(comparison(), 'en')
    assert.deepEqual([vm.outcome, vm.outcomeText], ['regression', 'REGRESSION'])
    assert.equal(vm.headline, 'Throughput: REGRESSION, 4 steps/s → 2.5 steps/s (-37.5%; noise ±2.0%).')
    assert.deepEqual(vm.figures.map((f) => [f.figure, f.outcome]), [['throughput', 'regression'], ['gpu-busy', 'within-noise']])
    assert.deepEqual(vm.causes.map((c) => [c.code, c.share, c.name]), [['data-wait', '90 %', 'data wait'], ['forward', '10 %', 'forward']])
    assert.match(vm.causes[0].text, /^Waiting for data: 20.0 ms → 200.0 ms per step/)
    assert.deepEqual(vm.causes[0].reasons, [{ code: 'loader-settings', text: 'DataLoader settings changed: num_workers=4 → num_workers=0.' }])
    assert.match(vm.baselineText, /^Against the previous run of the same command in the same folder: c720995f, started /)
  })
  test('in Chinese from the same references; the English where a reference is missing', () => {
    const doc = comparison()
    doc.causes[1].text_ref = null // data wait's (listed second)
    const vm = compareView(doc, 'zh')
    assert.deepEqual([vm.outcomeText, vm.causes[0].name, vm.causes[0].text], ['回退', '等待数据', 'english data-wait'])
    assert.match(vm.headline, /^吞吐量|回退/)
    assert.equal(compareView(null, 'en'), null)
  })
  test('a sidecar that keeps no runs says how to turn them on, in both languages', () => {
    for (const lang of ['en', 'zh']) {
      const text = notRecorded(lang)
      assert.ok(text.body.includes('--no-runs') && text.body.includes('--runs-db PATH'), text.body)
      assert.ok(text.more.includes('Runs: where they live and how to compare'), text.more)
    }
  })
})

describe("the plugin's side", () => {
  test("the session's runs: this user's, in its workspace or below", () => {
    const doc = runs([run({ id: 'a1' }), run({ id: 'a2', cwd: '/home/ada/proj/sub' }), run({ id: 'a3', cwd: '/home/ada/projx' }), run({ id: 'a4', uid: 1001 }), run({ id: 'a5', cwd: null })])
    assert.deepEqual(sessionRuns(doc, { id: 's', workspaces: ['/home/ada/proj/'] }, 1000).map((r) => r.id), ['a1', 'a2'])
    assert.deepEqual(sessionRuns(doc, { id: 's', workspaces: [] }, 1000), [])
    assert.deepEqual(sessionRuns(null, { id: 's', workspaces: ['/'] }, 1000), [])
  })
  test("the host's answer: the sidecar's document with the session's runs only; its refusals passed on", async () => {
    const session = { id: 's', workspaces: ['/home/ada/proj'], from: 'workspace' }
    const uid = typeof process.getuid === 'function' ? process.getuid() : 1000
    const doc = runs([run({ id: 'a1', uid }), run({ id: 'a2', uid, cwd: '/elsewhere' })])
    const ok = await sessionRunsAnswer(async () => ({ status: 200, body: doc }), '/api/dsh-gpu-dashboard/runs', session)
    assert.deepEqual([ok.status, ok.body.runs.map((r) => r.id), ok.body.session.id, ok.body.schema], [200, ['a1'], 's', 2])
    const off = { error: 'this sidecar keeps no runs: it was started with --no-runs (or without a runs ledger)', status: 404 }
    assert.deepEqual(await sessionRunsAnswer(async () => ({ status: 404, body: off }), '/x', session), { status: 404, body: off })
    assert.deepEqual(await sessionRunsAnswer(async () => ({ error: 'refused' }), '/x', session), { unreachable: 'refused' })
  })
  test('the proxy routes: /runs (the session kept for the filter) and /compare with checked run names', () => {
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/runs?session=abc'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/runs', session: 'abc', runs: true })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/compare?a=8439bf4c&b=boot%2F1-2'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/compare?a=8439bf4c&b=boot%2F1-2' })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/compare?a=x%0Ay&b=..%3Fz%3D1'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/compare' })
  })

  let plugin
  let dir
  before(async () => {
    const out = await build({
      absWorkingDir: resolve(here, '..'),
      entryPoints: ['src/client/runs.jsx'],
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'neutral',
      jsx: 'automatic',
      alias: { 'react/jsx-runtime': join(here, 'jsx-shim.mjs'), react: join(here, 'react-stub.mjs') },
      logLevel: 'silent',
    })
    dir = mkdtempSync(join(tmpdir(), 'dgd-runs-'))
    const file = join(dir, 'runs.mjs')
    writeFileSync(file, out.outputFiles[0].text)
    plugin = await import(pathToFileURL(file).href)
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  test("the GPU tab's table has the page's rows, a compare action each, and the comparison asked", () => {
    const doc = runs([run(), run({ id: '8439bf4c', started_unix_s: T0 + 3600 })])
    const html = render(plugin.RunsTable({ doc, lang: 'en', compare: { id: '8439bf4c', doc: comparison() }, onCompare() {} }))
    assert.deepEqual([...html.matchAll(/data-run-id="([^"]+)"/g)].map((m) => m[1]), runRows(doc, 'en').map((r) => r.id))
    assert.equal((html.match(/data-testid="dsh-gpu-run-compare"/g) || []).length, 2)
    assert.ok(html.includes('Compare with the previous run'))
    assert.match(html, /data-testid="dsh-gpu-compare" data-outcome="regression"/)
    assert.deepEqual([...html.matchAll(/data-testid="dsh-gpu-compare-cause" data-code="([^"]+)"/g)].map((m) => m[1]), ['data-wait', 'forward'])
    assert.ok(html.includes('num_workers=4 → num_workers=0'))
  })
  test('no runs kept: the notice, no table; no run in the folder: a line saying so', () => {
    const off = render(plugin.RunsTable({ off: true, lang: 'zh' }))
    assert.ok(off.includes('data-testid="dsh-gpu-runs-off"') && off.includes('未记录运行') && !off.includes('<table'))
    const refused = render(plugin.RunsTable({ doc: runs([run()]), lang: 'en', compare: { id: 'c720995f', error: 'HTTP 404: no earlier run' } }))
    assert.ok(refused.includes('Cannot compare: HTTP 404: no earlier run') && !refused.includes('dsh-gpu-compare"'))
    const none = render(plugin.RunsTable({ doc: runs([]), lang: 'en' }))
    assert.ok(none.includes('No recorded run in this session'))
  })
})
