// The GPU view's efficiency strip (src/client/efficiency.jsx), rendered without React: esbuild bundles
// it with test/jsx-shim.mjs as the JSX runtime, and the tests read the HTML it makes. Also the shared
// facts (sidecar/static/shared/efficiency.js) and the history data for a machine without an NVIDIA GPU.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { render } from './jsx-shim.mjs'
import { dataWait, efficiency, reasonKind, smText, utilText } from '../../sidecar/static/shared/efficiency.js'
import { cpuMode, gpuChartData, jobChartData } from '../../sidecar/static/shared/history_data.js'
import { t } from '../../sidecar/static/shared/format.js'
import { gpuCard } from '../../sidecar/static/shared/view_model.js'
import { EVENT_MARKERS_MAX, EVENT_MARKER_MIN_PX, eventMarkers, placeEventMarkers } from '../../sidecar/static/shared/charts.js'

const here = dirname(fileURLToPath(import.meta.url))
let mod
let dir

before(async () => {
  const out = await build({
    absWorkingDir: resolve(here, '..'),
    entryPoints: ['src/client/efficiency.jsx'],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'neutral',
    jsx: 'automatic',
    alias: { 'react/jsx-runtime': join(here, 'jsx-shim.mjs') },
    logLevel: 'silent',
  })
  dir = mkdtempSync(join(tmpdir(), 'dgd-eff-'))
  const file = join(dir, 'efficiency.mjs')
  writeFileSync(file, out.outputFiles[0].text)
  mod = await import(pathToFileURL(file).href)
})
after(() => rmSync(dir, { recursive: true, force: true }))

const gpu = (over = {}) => ({
  index: 0, name: 'NVIDIA H100', util_pct: 90, mem_used_mib: 1000, mem_total_mib: 80000, framework_index: 0,
  field_errors: {}, compute_capability: '9.0', sm_clock_mhz: 1200, sm_clock_max_mhz: 1980, mem_clock_mhz: 2619,
  clock_event_reasons: ['sw_power_cap', 'hw_thermal_slowdown'], power_w: 350, power_limit_w: 700, temperature_c: 87,
  pcie_link_gen: 3, pcie_link_gen_max: 5, pcie_link_width: 16, pcie_link_width_max: 16,
  sm_activity_fraction: 0.62, sm_occupancy_fraction: 0.31, tensor_activity_fraction: 0.05, dram_activity_fraction: null,
  pcie_tx_bytes_per_s: null, pcie_rx_bytes_per_s: null, nvlink_tx_bytes_per_s: null, nvlink_rx_bytes_per_s: null,
  mig_mode: false, mig_devices: [], ...over,
})
const main = (over = {}) => ({
  pid: 42, role: 'main', gpu: [{ index: 0, mem_used_mib: 900, sm_util_pct: 88, mig_index: null }],
  models: [{ name: 'net', param_dtypes: ['bfloat16'], autocast: 'off', input_shape: [8, 128],
    loader_settings: { num_workers: 0, pin_memory: true, persistent_workers: false, batch_size: 8 } }],
  step_breakdown: { window_s: 10, steps: 50, step_s: 0.2, data_wait_fraction: 0.5, forward_fraction: 0.25, optimizer_fraction: 0.05, other_fraction: 0.2 },
  math: { allow_tf32_matmul: true, cudnn_allow_tf32: true, float32_matmul_precision: 'high', cudnn_benchmark: false },
  syncs_per_step: 2,
  ...over,
})
const doc = (gpus, procs) => ({ schema: 2, model_gpu_index: gpus.length ? 0 : null, gpus, processes: procs, nvml: { ok: gpus.length > 0 } })

describe('the efficiency strip', () => {
  test('a stacked bar as wide as each share of the step, the step time and the syncs', () => {
    const html = render(mod.EfficiencyStrip({ doc: doc([gpu()], [main()]), lang: 'en' }))
    const widths = [...html.matchAll(/data-testid="dsh-gpu-eff-seg" data-key="(\w+)"[^>]*style="width:([\d.]+)%/g)].map((m) => [m[1], Number(m[2])])
    assert.deepEqual(widths, [['data', 50], ['forward', 25], ['optimizer', 5], ['other', 20]])
    assert.match(html, /Data wait 50 % \(last 10 s\)/)
    assert.match(html, /200 ms per step · 50 steps in the last 10 s · pid 42/)
    assert.match(html, /host syncs<\/span> <b>2 per step/)
  })
  test('clock reasons as badges, problems apart; the PCIe link below its maximum flagged; GPM values', () => {
    const html = render(mod.EfficiencyStrip({ doc: doc([gpu()], [main()]), lang: 'en' }))
    assert.match(html, /dgd-eff-reason-problem" data-reason="hw_thermal_slowdown"[^>]*>hardware thermal slowdown/)
    assert.match(html, /dgd-eff-reason-neutral" data-reason="sw_power_cap"/)
    assert.match(html, /data-testid="dsh-gpu-eff-pcie" data-flag="bad">.*Gen3 x16 of Gen5 x16.*below its maximum/)
    assert.match(html, /1200 of 1980 MHz/)
    assert.match(html, /350 of 700 W/)
    assert.match(html, /SM activity<\/span> <b>62 %/)
    assert.doesNotMatch(html, /GPM metrics n\/a/)
    assert.equal(reasonKind('gpu_idle'), 'neutral')
    assert.equal(reasonKind('hw_power_brake_slowdown'), 'problem')
  })
  test('GPM unsupported: one compact reason from field_errors, never 0 %', () => {
    const reason = 'GPM not supported on this GPU'
    const g = gpu({ sm_activity_fraction: null, sm_occupancy_fraction: null, tensor_activity_fraction: null,
      field_errors: { sm_activity_fraction: reason, sm_occupancy_fraction: reason, tensor_activity_fraction: reason, dram_activity_fraction: reason } })
    const html = render(mod.EfficiencyStrip({ doc: doc([g], [main()]), lang: 'en' }))
    assert.match(html, new RegExp(`data-testid="dsh-gpu-eff-gpm-na">GPM metrics n/a: ${reason}<`))
    assert.doesNotMatch(html, /dsh-gpu-eff-gpm"/)
    // some GPM present, some not: which are missing, and why
    const partial = gpu({ field_errors: { nvlink_tx_bytes_per_s: 'no NVLink', nvlink_rx_bytes_per_s: 'no NVLink' } })
    const html2 = render(mod.EfficiencyStrip({ doc: doc([partial], [main()]), lang: 'en' }))
    assert.match(html2, /data-testid="dsh-gpu-eff-gpm-na">NVLink traffic n\/a: no NVLink</)
    assert.match(html2, /SM activity<\/span> <b>62 %/)
  })
  test('MIG: instances on the card, "n/a on MIG" for a process SM', () => {
    const g = gpu({ mig_mode: true, mig_devices: [{ index: 0, uuid: 'MIG-0', gpu_instance_id: 1, compute_instance_id: 0, mem_used_mib: 10, mem_total_mib: 9856 }] })
    const p = main({ gpu: [{ index: 0, mem_used_mib: 900, sm_util_pct: null, mig_index: 0 }] })
    const html = render(mod.MigList({ mig: gpuCard(doc([g], [p]), g, 'en').mig }))
    assert.match(html, /data-testid="dsh-gpu-mig-device" data-mig-index="0">.*MIG 0.*GI 1 · CI 0.*pid 42.*10 MiB of 9.6 GiB/)
    assert.equal(smText(p, 'en'), 'n/a on MIG')
    assert.equal(smText(main(), 'en'), '88 %')
    assert.equal(utilText({ ...g, util_pct: null }, 'en'), 'n/a on MIG')
    assert.equal(utilText(gpu({ util_pct: null }), 'en'), '—')
    assert.equal(utilText(gpu(), 'en'), '90 %')
    assert.equal(render(mod.MigList({ mig: gpuCard(doc([gpu()], [main()]), gpu(), 'en').mig })), '')
  })
  test('an AMD or Intel GPU: headed as its card ("GPU 1 · AMD"), its clock the GPU\'s, never "SM"; NVIDIA\'s as before', () => {
    const vendorGpu = (vendor, driver) => gpu({
      index: 1, vendor, driver, name: vendor === 'amd' ? 'AMD Instinct MI300X OAM' : 'Intel GPU', compute_capability: null,
      framework_index: null, clock_event_reasons: vendor === 'intel' ? ['sw_power_cap'] : null, pcie_link_gen: null,
      pcie_link_gen_max: null, pcie_link_width: null, pcie_link_width_max: null, sm_activity_fraction: null,
      sm_occupancy_fraction: null, tensor_activity_fraction: null,
    })
    const on = (g) => doc([g], [main({ gpu: [{ index: 1, mem_used_mib: 900, sm_util_pct: 88, mig_index: null }] })])
    for (const [vendor, driver, name] of [['amd', 'amdgpu', 'AMD'], ['intel', 'xe', 'Intel']]) {
      const g = vendorGpu(vendor, driver)
      const facts = efficiency({ ...on(g), model_gpu_index: 1 }, 'en').gpu
      assert.equal(facts.title, `GPU 1 · ${name}`)
      assert.equal(facts.title, gpuCard(on(g), g, 'en').title) // the same words as the GPU's card
      const clock = facts.items.find((i) => i.key === 'clock')
      assert.equal(clock.label, 'GPU clock')
      assert.equal(clock.value, '1200 of 1980 MHz')
      const html = render(mod.EfficiencyStrip({ doc: { ...on(g), model_gpu_index: 1 }, lang: 'en' }))
      assert.doesNotMatch(html, /SM clock|SM activity|compute capability/)
      assert.match(html, new RegExp(`GPU 1 · ${name}`))
      const zhFacts = efficiency({ ...on(g), model_gpu_index: 1 }, 'zh').gpu
      assert.equal(zhFacts.items.find((i) => i.key === 'clock').label, 'GPU 时钟')
    }
    // NVIDIA's, and a document from before the vendor field: the words of before
    for (const g of [gpu({ vendor: 'nvidia' }), gpu()]) {
      const facts = efficiency(doc([g], [main()]), 'en').gpu
      assert.equal(facts.title, 'GPU 0')
      assert.equal(facts.items.find((i) => i.key === 'clock').label, 'SM clock')
    }
  })
  test('Chinese, and nothing at all without facts', () => {
    const html = render(mod.EfficiencyStrip({ doc: doc([gpu()], [main()]), lang: 'zh' }))
    assert.match(html, /效率/)
    assert.match(html, /等待数据 50 %/)
    assert.match(html, /硬件温控降频/)
    assert.equal(render(mod.EfficiencyStrip({ doc: doc([], [{ pid: 1, gpu: [], models: [] }]), lang: 'en' })), '')
    assert.equal(efficiency(doc([], []), 'en').empty, true)
  })
})

describe('a process\'s data wait, named by its window', () => {
  const loaderModel = (wait, n) => ({ name: `m${n}`, data_wait_fraction: wait, data_wait_batches: n })
  test('the step breakdown\'s figure, the very one of the strip\'s bar, over its seconds', () => {
    const p = main({ models: [loaderModel(0.9, 64)] })
    const w = dataWait(p, 'en')
    assert.deepEqual(w, { fraction: 0.5, value: '50 %', window: 'last 10 s', source: 'steps' })
    const bar = efficiency(doc([gpu()], [p]), 'en').step.segments.find((s) => s.key === 'data')
    assert.equal(bar.text, `Data wait ${w.value} (${w.window})`)
    assert.equal(dataWait(p, 'zh').window, '最近 10 秒')
  })
  test('without a breakdown: the highest of its models\' loader figures, over their batches', () => {
    const p = main({ step_breakdown: null, models: [loaderModel(0.1, 64), loaderModel(0.7, 12)] })
    assert.deepEqual(dataWait(p, 'en'), { fraction: 0.7, value: '70 %', window: 'last 12 batches', source: 'batches' })
    assert.equal(dataWait(p, 'zh').window, '最近 12 个批次')
    // a breakdown without a data wait measured falls back too; an older probe names no window
    const q = main({ step_breakdown: { ...main().step_breakdown, data_wait_fraction: null }, models: [{ name: 'm', data_wait_fraction: 0.2 }] })
    assert.deepEqual(dataWait(q, 'en'), { fraction: 0.2, value: '20 %', window: null, source: 'batches' })
    assert.equal(dataWait(main({ step_breakdown: null, models: [{ name: 'm', data_wait_fraction: null }] }), 'en'), null)
  })
})

describe('event markers (charts.js, the page\'s and the plugin\'s charts)', () => {
  const every = (stepS, n, from = 0) => Array.from({ length: n }, (_, i) => ({ time_unix_s: from + i * stepS, name: `e${i}` }))
  test('an event every 0.4 s for 10 minutes: a bounded number of markers, every event in one of them', () => {
    const events = every(0.4, 1500)
    for (const iw of [300, 600, 1400]) {
      const markers = eventMarkers(events, 0, 600, iw)
      const spanPx = Math.max(EVENT_MARKER_MIN_PX, iw / (EVENT_MARKERS_MAX - 1))
      const fit = Math.min(EVENT_MARKERS_MAX, Math.floor(iw / spanPx) + 1) // as many as the chart has room for
      assert.ok(markers.length <= fit && markers.length >= fit - 1, `${markers.length} markers on ${iw} px (${fit} fit)`)
      assert.deepEqual(markers.flatMap((m) => m.events), events) // each once, in time order
      const px = markers.map((m) => (m.time_unix_s / 600) * iw)
      for (let i = 1; i < px.length; i += 1) assert.ok(px[i] - px[i - 1] >= spanPx / 2 - 1e-9, `markers ${i - 1}, ${i} ${px[i] - px[i - 1]} px apart`)
    }
  })
  test('events far apart keep a marker each; close ones merge at their middle', () => {
    assert.deepEqual(eventMarkers(every(60, 5), 0, 300, 600).map((m) => m.events.length), [1, 1, 1, 1, 1])
    const [m, ...rest] = eventMarkers([{ time_unix_s: 101, name: 'b' }, { time_unix_s: 100, name: 'a' }], 0, 300, 600)
    assert.deepEqual(rest, [])
    assert.deepEqual(m, { time_unix_s: 100.5, events: [{ time_unix_s: 100, name: 'a' }, { time_unix_s: 101, name: 'b' }] })
  })
  test('labelled markers: every event in one, no label over another label or line, none past the edges', () => {
    // a label 7 px a character ("133 events": 70 px); the chart's plot from 58 px, labels up to `right`
    const widthOf = (text) => text.length * 7
    const labelOf = (mk) => (mk.events.length > 1 ? `${mk.events.length} events` : mk.events[0].name)
    for (const [events, iw] of [[every(1, 300), 300], [every(0.4, 750), 1100], [every(60, 5), 600], [every(1, 3, 297), 300]]) {
      const x = (t) => 58 + (t / 300) * iw
      const right = 58 + iw + 10
      const placed = placeEventMarkers(eventMarkers(events, 0, 300, iw), { xOf: x, labelOf, widthOf, left: 58, right })
      assert.deepEqual(placed.flatMap((m) => m.events), events.filter((e) => e.time_unix_s <= 300))
      for (const [i, m] of placed.entries()) {
        assert.equal(m.label, labelOf(m))
        assert.ok(m.box[0] >= 58 && m.box[1] <= right, `marker ${i} ${m.box} leaves [58, ${right}]`)
        assert.ok(m.x === x(m.anchor === 'start' ? m.events[0].time_unix_s : m.events[m.events.length - 1].time_unix_s))
        if (i) {
          const p = placed[i - 1]
          assert.ok(m.box[0] >= p.box[1] && m.x > p.box[1] && m.x > p.x, `markers ${i - 1}, ${i}: ${p.box} ${p.x} / ${m.box} ${m.x}`)
        }
      }
    }
    // the newest events at the right edge: their label left of their line, not past the chart
    const edge = placeEventMarkers([{ events: [{ time_unix_s: 0, name: 'a' }] }, { events: [{ time_unix_s: 299, name: 'epoch_end' }] }], { xOf: (t) => 58 + t, labelOf, widthOf, left: 58, right: 360 })
    assert.deepEqual(edge.map((m) => [m.anchor, m.label]), [['start', 'a'], ['end', 'epoch_end']])
    // two events with no room between them for a label: one marker, "2 events"
    const close = placeEventMarkers([{ events: [{ time_unix_s: 0, name: 'a' }] }, { events: [{ time_unix_s: 5, name: 'b' }] }], { xOf: (t) => 58 + t, labelOf, widthOf, left: 58, right: 360 })
    assert.deepEqual(close.map((m) => m.label), ['2 events'])
  })
  test('only the window\'s events; nothing for no window, no width or no list', () => {
    assert.deepEqual(eventMarkers(every(10, 10), 25, 55, 600).flatMap((m) => m.events.map((e) => e.time_unix_s)), [30, 40, 50])
    assert.deepEqual(eventMarkers([null, { time_unix_s: NaN }, { name: 'x' }], 0, 10, 600), [])
    assert.deepEqual(eventMarkers(every(1, 3), 10, 10, 600), [])
    assert.deepEqual(eventMarkers(every(1, 3), 0, 10, 0), [])
    assert.deepEqual(eventMarkers(null, 0, 10, 600), [])
  })
})

describe('history data', () => {
  const tr = (k, v) => t('en', k, v)
  const samples = [0, 1, 2].map((i) => ({
    time_unix_s: 100 + i, gpus: [], processes: [], cpu_pct: 150 + i, rss_mib: 2000, forward_rate_hz: 12, step_rate_hz: null,
  }))
  test('without an NVIDIA GPU: the job CPU, RSS and forward rate', () => {
    assert.equal(cpuMode({ gpus: [], nvml: { ok: false } }), true)
    assert.equal(cpuMode(doc([gpu()], [])), false)
    const d = jobChartData(samples, 90, tr)
    assert.deepEqual(d.cpu.series[0].points.map((p) => p[1]), [150, 151, 152])
    assert.deepEqual(d.rss.series[0].points.length, 3)
    assert.deepEqual(d.rate.series.map((s) => s.key), ['forward'])
    assert.ok(d.cpu.yMax >= 152)
  })
  test('a rate near the largest double: finite ticks, no endless loop', () => {
    for (const rate of [1.5e308, Number.MAX_VALUE, 1e300]) {
      const d = jobChartData([{ ...samples[0], forward_rate_hz: rate }], 90, tr)
      assert.ok(d.rate.yTicks.length <= 8 && d.rate.yTicks.every(Number.isFinite), String(rate))
      assert.ok(Number.isFinite(d.rate.yMax) && d.rate.yMax >= rate, String(rate))
    }
  })
  test('GPM lines beside utilisation, power with its limit', () => {
    const s = [{ time_unix_s: 100, processes: [], gpus: [{ index: 0, util_pct: 90, mem_used_mib: 10, sm_activity_fraction: 0.6, sm_occupancy_fraction: null, power_w: 300, temperature_c: 80 }] }]
    const d = gpuChartData(doc([gpu()], []), s, 90, tr)
    assert.deepEqual(d.util.series.map((x) => x.key), ['0', '0-sm-active'])
    assert.equal(d.util.series[1].points[0][1], 60)
    assert.equal(d.power.limits[0].value, 700)
    const two = [{ time_unix_s: 100, processes: [], gpus: [0, 1].map((index) => ({ index, util_pct: 1, mem_used_mib: 1, power_w: 60 })) }]
    const d2 = gpuChartData(doc([gpu(), gpu({ index: 1 })], []), two, 90, tr)
    assert.deepEqual(d2.power.limits, [{ value: 700, label: 'GPU 0, 1 limit 700 W' }])
  })
})
