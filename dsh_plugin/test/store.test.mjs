// The one data layer (sidecar/static/shared/store.js) and the one job order (view_model.js jobList),
// run as each consumer runs them: the standalone page through page/feed.js and page/jobs.js (with a
// stand-in for its DOM helper h()), the plugin through src/client/store.js (its poller, on a stand-in
// fetch and mocked timers) and src/client/jobs.jsx (rendered without React, test/jsx-shim.mjs). Both
// are fed the same answers and must keep the same history and show the same rows.
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { after, before, describe, mock, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { render } from './jsx-shim.mjs'
import {
  HISTORY_MAX_EVENTS, HISTORY_MAX_SAMPLES, emptyHistory, mergeEvents, mergeSamples, withHistory, withStatus,
} from '../../sidecar/static/shared/store.js'
import { defaultJobId, jobList, orderJobs } from '../../sidecar/static/shared/view_model.js'
import { pollJob } from '../../sidecar/static/page/feed.js'
import { renderJobs } from '../../sidecar/static/page/jobs.js'

const here = dirname(fileURLToPath(import.meta.url))
const times = (list) => list.map((x) => x.time_unix_s)
const sample = (t, tag = 'sidecar') => ({ time_unix_s: t, gpus: [], processes: [], cpu_pct: null, tag })
const event = (t, name, pid = 1) => ({ time_unix_s: t, name, pid })
const statusDoc = (jobId, events = []) => ({ schema: 2, job_id: jobId, status: 'GPU', events, jobs: null })

// ------------------------------------------------------------------ a scripted sidecar, as each consumer asks it

/**
 * Answers /status with `statuses[i]` and /history with `histories[i]` at the i-th poll (the last
 * ones again after that), whatever ?since= asks: the answers a test wants (out of order, repeated),
 * not what a sidecar would choose. Records each history request's `since` and `job`.
 */
function scriptedSidecar(statuses, histories) {
  let s = 0
  let h = 0
  const asked = []
  const get = (url) => {
    const u = new URL(url, 'http://sidecar/')
    if (u.pathname.endsWith('/config')) return { sidecarUrl: 'http://127.0.0.1:1' }
    if (u.pathname.endsWith('/status')) return statuses[Math.min(s++, statuses.length - 1)]
    asked.push({ since: u.searchParams.get('since'), job: u.searchParams.get('job') })
    const [jobId, samples, events = []] = histories[Math.min(h++, histories.length - 1)]
    return { schema: 2, job_id: jobId, interval_s: 1.5, samples: samples.map((x) => ({ ...x })), events, events_omitted: 0 }
  }
  return { get, asked }
}

/**
 * A sidecar whose default job is `jobs[0]` until it answers its `switchAt`-th status request, then
 * `jobs[1]` (the first exited, say): /status and /history (after ?since=, as the sidecar answers)
 * are of the default job at the time they are asked.
 */
function switchingSidecar(jobs, switchAt) {
  let statuses = 0
  const asked = []
  const get = (url) => {
    const u = new URL(url, 'http://sidecar/')
    if (u.pathname.endsWith('/config')) return { sidecarUrl: 'http://127.0.0.1:1' }
    const now = jobs[statuses >= switchAt ? 1 : 0]
    if (u.pathname.endsWith('/status')) {
      statuses += 1
      return jobs[statuses >= switchAt ? 1 : 0].status
    }
    const since = u.searchParams.get('since')
    asked.push({ since, job: now.status.job_id })
    const samples = now.ring.filter((x) => since === null || x.time_unix_s > Number(since)).map((x) => ({ ...x }))
    return { schema: 2, job_id: now.status.job_id, interval_s: 1.5, samples, events: [], events_omitted: 0 }
  }
  return { get, asked }
}

/** The page: `polls` polls of page/feed.js, one after the other, as app.js makes them. */
async function pageHistory(sidecar, polls) {
  let history = emptyHistory()
  for (let i = 0; i < polls; i++) ({ history } = await pollJob(async (url) => sidecar.get(url), { job: null, history, lang: 'en' }))
  return history
}

let pluginRuns = 0
/** The plugin: its store (a fresh instance) polling `polls` times on mocked timers, status and history as the GPU view subscribes them. */
async function pluginHistory(sidecar, polls) {
  const settle = async () => {
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r))
  }
  globalThis.window = { localStorage: { getItem: () => null, setItem() {} } }
  globalThis.fetch = async (url) => {
    const body = sidecar.get(url)
    return { status: 200, headers: { get: () => 'application/json' }, json: async () => body, text: async () => '' }
  }
  mock.timers.enable({ apis: ['setTimeout'] })
  try {
    const { getStore } = await import(`../src/client/store.js?run=${++pluginRuns}`)
    const store = getStore()
    const offStatus = store.subscribeStatus(() => {})
    const offHistory = store.subscribeHistory(() => {})
    for (let i = 0; i < polls; i++) {
      mock.timers.tick(i ? 2000 : 0) // the default refresh (2 s) and history period (at least 2 s)
      await settle()
    }
    offHistory()
    offStatus()
    return store.history.get()
  } finally {
    mock.timers.reset()
    delete globalThis.window
    delete globalThis.fetch
  }
}

const CONSUMERS = { page: pageHistory, plugin: pluginHistory }

describe('the shared history, as the page and as the plugin keep it', () => {
  for (const [name, run] of Object.entries(CONSUMERS)) {
    test(`${name}: samples out of order are sorted, repeated ones kept once, events merged with the status document's`, async () => {
      const sidecar = scriptedSidecar(
        [statusDoc('7-1', [event(0.5, 'start'), event(1, 'b')])],
        [
          ['7-1', [sample(5), sample(3, 'first'), sample(4), sample(3, 'again'), sample(1), sample(2)], [event(2, 'a'), event(1, 'b'), event(2, 'a')]],
          ['7-1', [sample(7), sample(5, 'again'), sample(6)], [event(2, 'a', 9)]],
          ['7-1', [sample(9), sample(8, 'first'), sample(8, 'again')], []],
          ['7-1', [], []],
        ],
      )
      const h = await run(sidecar, 4)
      assert.deepEqual(times(h.samples), [1, 2, 3, 4, 5, 6, 7, 8, 9])
      assert.deepEqual([h.samples[2].tag, h.samples[4].tag, h.samples[7].tag], ['first', 'sidecar', 'first'], 'the sample kept first stays')
      assert.deepEqual(h.events.map((e) => [e.time_unix_s, e.name, e.pid]), [[0.5, 'start', 1], [1, 'b', 1], [2, 'a', 1], [2, 'a', 9]])
      assert.deepEqual([h.jobId, h.lastTime, h.intervalS], ['7-1', 9, 1.5])
      // each poll asks for what follows the newest sample kept
      assert.deepEqual(sidecar.asked.map((a) => a.since), [null, '5', '7', '9'])
    })

    test(`${name}: at most HISTORY_MAX_SAMPLES samples, the newest`, async () => {
      const n = HISTORY_MAX_SAMPLES + 25
      const ring = Array.from({ length: n }, (_, i) => sample(1000 + i)).reverse() // newest first: all out of order
      const h = await run(scriptedSidecar([statusDoc('7-1')], [['7-1', ring], ['7-1', [sample(1000 + n)]]]), 2)
      assert.equal(h.samples.length, HISTORY_MAX_SAMPLES)
      assert.deepEqual([h.samples[0].time_unix_s, h.lastTime], [1000 + 26, 1000 + n])
    })

    test(`${name}: another job (the sidecar's default changed) starts another history, its whole ring`, async () => {
      // the new job ran already: one of its samples is older than the old job's newest
      const sidecar = switchingSidecar([
        { status: statusDoc('7-1', [event(1, 'old')]), ring: [sample(1), sample(2)] },
        { status: statusDoc('8-2', [event(50, 'new')]), ring: [sample(1.5), sample(40), sample(41)] },
      ], 2)
      const h = await run(sidecar, 4)
      assert.equal(h.jobId, '8-2')
      assert.deepEqual(times(h.samples), [1.5, 40, 41])
      assert.deepEqual(h.events.map((e) => e.name), ['new'])
      assert.deepEqual(sidecar.asked.at(-1), { since: '41', job: '8-2' })
    })
  }

  test('the bundle DSH loads holds the one data layer and its one cap', () => {
    const bundle = readFileSync(resolve(here, '..', 'dist', 'client.js'), 'utf8')
    assert.equal(bundle.split('// ../sidecar/static/shared/store.js\n').length, 2, 'shared/store.js bundled once')
    assert.deepEqual(bundle.match(/\bHISTORY_MAX_SAMPLES = [^;]+;/g), ['HISTORY_MAX_SAMPLES = 2e4;'])
    assert.equal(HISTORY_MAX_SAMPLES, 2e4)
  })
})

describe('store.js merging', () => {
  test('events: one per time, name and pid; the newest HISTORY_MAX_EVENTS', () => {
    const many = Array.from({ length: HISTORY_MAX_EVENTS + 10 }, (_, i) => event(i, 'e'))
    const kept = mergeEvents([], many.slice().reverse())
    assert.equal(kept.length, HISTORY_MAX_EVENTS)
    assert.deepEqual([kept[0].time_unix_s, kept.at(-1).time_unix_s], [10, HISTORY_MAX_EVENTS + 9])
    assert.deepEqual(mergeEvents(undefined, [null, 'x', { name: 'no time' }]), [])
  })
  test('nothing new leaves the list itself (no re-render for a repeated answer)', () => {
    const have = mergeSamples([], [sample(1), sample(2)])
    assert.equal(mergeSamples(have, [sample(2, 'again'), sample(1)]), have)
    assert.equal(mergeSamples(have, []), have)
    const h = withStatus(emptyHistory('7-1'), statusDoc('7-1'))
    assert.equal(withStatus(h, statusDoc('7-1')), h)
  })
  test("an answer of another job than the one kept is dropped (asked before the job changed); the arguments stay as they were", () => {
    const h = withHistory(emptyHistory(), { job_id: '7-1', samples: [sample(2), sample(1)], events: [] })
    const frozen = JSON.stringify(h)
    assert.equal(withHistory(h, { job_id: '8-2', samples: [sample(3)], events: [] }), h)
    withHistory(h, { job_id: '7-1', samples: [sample(0), sample(3)], events: [event(1, 'x')] })
    withStatus(h, statusDoc('8-2', [event(1, 'y')]))
    assert.equal(JSON.stringify(h), frozen)
  })
})

// ------------------------------------------------------------------ the job list

const job = (id, over = {}) => ({
  id, root_pid: Number(id.split('-')[0]), command: ['python', `${id}.py`], user: 'ann', uid: 1000, cwd: '/w',
  start_time_unix_s: 100, alive: true, ended_unix_s: null, status: 'GPU', message: `job ${id}`, message_ref: null,
  first_warning: null, warning_count: 0, gpus: [0], process_count: 1, has_model: true, ...over,
})
// live: 2 (started 300), 1 (100), 5 (start unknown); exited: 3 (ended 400), 4 (ended 250)
const JOBS = [
  job('1-1'),
  job('3-3', { alive: false, start_time_unix_s: 50, ended_unix_s: 400, status: 'CPU' }),
  job('2-2', { start_time_unix_s: 300 }),
  job('4-4', { alive: false, start_time_unix_s: 200, ended_unix_s: 250 }),
  job('5-5', { start_time_unix_s: null, status: 'CPU' }),
]
const LIVE = ['2-2', '1-1', '5-5']
const EXITED = ['3-3', '4-4']

/** The page's switcher, drawn with a stand-in for dom.js h(): {tag, attrs, children, open}. */
function pageJobs(doc) {
  const h = (tag, attrs, ...children) => ({ tag, attrs: attrs || {}, children: children.flat().filter(Boolean), open: false, addEventListener() {} })
  const nav = { hidden: true, children: [], replaceChildren(...c) { this.children = c } }
  renderJobs(nav, doc, { h, tr: (key, vars) => `${key} ${JSON.stringify(vars)}`, lang: 'en', onPick() {} })
  const ids = (list) => list.filter((c) => c.attrs['data-testid'] === 'job').map((c) => c.attrs['data-job-id'])
  const exited = nav.children.find((c) => c.tag === 'details')
  return {
    live: ids(nav.children),
    exited: exited ? ids(exited.children) : [],
    exitedOpen: exited ? exited.open : null,
    exitedLabel: exited ? exited.children[0].attrs.text : null,
    pressed: [...nav.children, ...(exited ? exited.children : [])].filter((c) => c.attrs['aria-pressed'] === 'true').map((c) => c.attrs['data-job-id']),
  }
}

describe('the job list, as the page and as the plugin show it', () => {
  let plugin
  let dir
  before(async () => {
    const out = await build({
      absWorkingDir: resolve(here, '..'),
      entryPoints: ['src/client/jobs.jsx'],
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'neutral',
      jsx: 'automatic',
      alias: { 'react/jsx-runtime': join(here, 'jsx-shim.mjs'), react: join(here, 'react-stub.mjs') },
      logLevel: 'silent',
    })
    dir = mkdtempSync(join(tmpdir(), 'dgd-jobs-'))
    const file = join(dir, 'jobs.mjs')
    writeFileSync(file, out.outputFiles[0].text)
    plugin = await import(pathToFileURL(file).href)
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  /** The plugin's session list (JobRows), read back from its HTML. */
  function pluginJobs(jobs, selected) {
    const html = render(plugin.JobRows({ jobs, selected, lang: 'en', onSelect() {} }))
    const ids = (text) => [...text.matchAll(/data-job-id="([^"]+)"/g)].map((m) => m[1])
    const at = html.indexOf('<details')
    const details = at < 0 ? null : /^<details[^>]*>/.exec(html.slice(at))[0]
    return {
      live: ids(at < 0 ? html : html.slice(0, at)),
      exited: at < 0 ? [] : ids(html.slice(at)),
      exitedOpen: details === null ? null : / open="/.test(details),
      exitedLabel: at < 0 ? null : /<summary[^>]*>([^<]*)<\/summary>/.exec(html)[1],
      pressed: [...html.matchAll(/data-job-id="([^"]+)"[^>]*aria-pressed="true"/g)].map((m) => m[1]),
    }
  }

  const CONSUMERS = { page: (jobs, shown) => pageJobs({ jobs, job_id: shown }), plugin: pluginJobs }
  for (const [name, show] of Object.entries(CONSUMERS)) {
    test(`${name}: live jobs the newest first, then the exited ones the newest ended first, collapsed`, () => {
      const got = show(JOBS, '1-1')
      assert.deepEqual([got.live, got.exited], [LIVE, EXITED])
      assert.deepEqual([got.exitedOpen, got.exitedLabel, got.pressed], [false, 'Exited jobs (2)', ['1-1']])
    })
    test(`${name}: the exited jobs open when the job shown is one of them`, () => {
      const got = show(JOBS.slice().reverse(), '4-4')
      assert.deepEqual([got.live, got.exited, got.exitedOpen, got.pressed], [LIVE, EXITED, true, ['4-4']])
    })
    test(`${name}: the viewer's own live jobs first, then the others, the newest first within each`, () => {
      // the sidecar marks `yours` per request: bob's 2-2 is the newest, ann's 1-1 and 5-5 are hers
      const marked = JOBS.map((j) => ({ ...j, yours: ['1-1', '5-5', '3-3'].includes(j.id) ? true : j.id === '2-2' ? false : null }))
      const got = show(marked, '1-1')
      assert.deepEqual([got.live, got.exited, got.exitedOpen], [['1-1', '5-5', '2-2'], EXITED, false])
      // not told (null, or an older sidecar without the field): newest first as before
      const unknown = show(JOBS.map((j) => ({ ...j, yours: null })), '1-1')
      assert.deepEqual([unknown.live, unknown.exited], [LIVE, EXITED])
    })
    test(`${name}: no exited job, no disclosure`, () => {
      const got = show(JOBS.filter((j) => j.alive), '2-2')
      assert.deepEqual([got.live, got.exited, got.exitedOpen], [LIVE, [], null])
    })
  }

  test("the plugin's chip counts the live jobs only, coloured by the worst of them", () => {
    const html = render(plugin.JobsCount({ jobs: JOBS, lang: 'en' }))
    assert.match(html, /data-count="3"/)
    assert.match(html, /data-worst="CPU"[^>]*data-worst-job="5-5"/) // 3-3 is CPU too, but exited
    assert.match(html, />3 jobs</)
    assert.equal(render(plugin.JobsCount({ jobs: JOBS.filter((j) => !j.alive), lang: 'en' })), '')
  })

  test('the job shown when none is chosen: the newest live of the first group with one, else the newest exited', () => {
    assert.equal(defaultJobId(JOBS), '2-2')
    const exitedOnly = JOBS.filter((j) => !j.alive)
    assert.equal(defaultJobId(exitedOnly, [job('9-9')]), '9-9')
    assert.equal(defaultJobId(exitedOnly, []), '3-3')
    assert.equal(defaultJobId([], null), null)
    assert.equal(defaultJobId(JOBS.map((j) => ({ ...j, yours: j.id === '1-1' }))), '1-1') // the viewer's newest live
  })

  test('rows carry what both lay out', () => {
    const vm = jobList([job('6-6', { command: null, user: null, alive: false, ended_unix_s: 1 })], 'zh', null)
    assert.deepEqual(vm.exited[0], {
      id: '6-6', status: 'GPU', alive: false, pid: '6', cmd: '', user: null, exited: '已退出', message: 'job 6-6', shown: false,
    })
    assert.equal(vm.exitedLabel, '已退出的任务（1）')
    assert.deepEqual(orderJobs(undefined), { live: [], exited: [] })
  })
})
