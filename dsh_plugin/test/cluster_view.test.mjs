// The cluster view's cells (sidecar/static/shared/view_model.js clusterNodeRows, clusterRankRows,
// clusterView): what the page's Cluster section and the plugin's GPU tab lay out of a ClusterDocument.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  CLUSTER_NODE_COLUMNS, CLUSTER_RANK_COLUMNS, clusterNodeRows, clusterRankRows, clusterView, isDistributed,
} from '../../sidecar/static/shared/view_model.js'

const gpu = (over = {}) => ({ index: 0, uuid: 'GPU-0', name: 'NVIDIA H100', util_pct: 90, mem_used_mib: 20480, mem_total_mib: 81920, sm_clock_mhz: 1980, sm_activity_fraction: 0.71, clock_events: [], ...over })
const rank = (over = {}) => ({ rank: 0, local_rank: 0, node: 'node-a', job_id: '100-5', gpus: [0], forward_rate_per_s: 9.5, data_wait_fraction: 0.1, forward_fraction: 0.3, optimizer_fraction: 0.1, other_fraction: 0.2, backward_fraction: 0.15, collective_wait_fraction: 0.05, window_steps: 40, ...over })
const warning = (code, id, params) => ({ code, severity: 'warning', message: `english ${code}`, hint: null, message_ref: { id, params }, hint_ref: null })
const cluster = (over = {}) => ({
  schema: 2,
  time_unix_s: 1000,
  prometheus: 'http://prometheus:9090',
  job: null,
  nodes: [
    { node: 'node-a', reporting: true, why: null, poll_age_s: 1.2, gpus: [gpu({ clock_events: ['sw_thermal_slowdown', 'gpu_idle'] }), gpu({ index: 1, util_pct: 3 })] },
    { node: 'node-b', reporting: true, why: null, poll_age_s: 1.0, gpus: [gpu()] },
    { node: 'node-c', reporting: false, why: 'stale', poll_age_s: 95, gpus: [] },
  ],
  jobs: [
    { job_key: 'run-7', world_size: 4, nodes: ['node-a', 'node-b'], status: 'GPU', ranks: [rank({ rank: 2, node: 'node-b', data_wait_fraction: 0.6 }), rank(), rank({ rank: 1, gpus: [1], forward_rate_per_s: null })], warnings: [warning('ranks-missing', 'warning.ranks-missing', { seen: 3, world: 4, ranks: '3', job: 'run-7' })] },
    { job_key: 'node-a/200-1', world_size: null, nodes: ['node-a'], status: null, ranks: [], warnings: [] },
  ],
  warnings: [warning('node-missing', 'warning.node-missing.stale', { node: 'node-c', age: '95 s' })],
  ...over,
})

describe('cluster nodes', () => {
  test('a row per GPU, node and state on the first; a node without GPUs keeps one row', () => {
    const rows = clusterNodeRows(cluster(), 'en')
    assert.deepEqual(rows.map((r) => [r.node, r.first, r.cells.gpu.text]), [['node-a', true, '0'], ['node-a', false, '1'], ['node-b', true, '0'], ['node-c', true, '—']])
    assert.deepEqual(CLUSTER_NODE_COLUMNS.map((c) => c.key), ['node', 'state', 'gpu', 'util', 'mem', 'clock', 'sm', 'slowedBy'])
    const a0 = rows[0].cells
    assert.deepEqual([a0.util.text, a0.util.level, a0.mem.text, a0.clock.text, a0.sm.text], ['90 %', 'high', '20 GiB of 80 GiB', '1980 MHz', '71 %'])
    assert.deepEqual(a0.slowedBy.items.map((r) => [r.name, r.kind]), [['sw_thermal_slowdown', 'problem'], ['gpu_idle', 'neutral']])
    assert.equal(a0.slowedBy.text, 'software thermal slowdown, idle')
    assert.equal(rows[1].cells.slowedBy.na, true)
  })
  test("the clock column is NVIDIA's SM clock unless an AMD or Intel GPU is listed: then its GPU clock", () => {
    const label = (c) => clusterView(c, null, 'en').nodeColumns.find((col) => col.key === 'clock').label
    assert.equal(label(cluster()), 'col.smClock')
    assert.equal(label(cluster({ nodes: [{ node: 'node-a', reporting: true, gpus: [gpu({ vendor: 'nvidia' })] }] })), 'col.smClock')
    for (const vendor of ['amd', 'intel']) {
      const mixed = cluster({ nodes: [{ node: 'node-a', reporting: true, gpus: [gpu({ vendor: 'nvidia' }), gpu({ index: 1, vendor })] }] })
      assert.equal(label(mixed), 'col.gpuClock')
    }
    assert.equal(CLUSTER_NODE_COLUMNS.find((col) => col.key === 'clock').label, 'col.smClock')
  })
  test('a missing node is marked with why, its last poll in the title', () => {
    const c = clusterNodeRows(cluster(), 'en')[3].cells
    assert.deepEqual([c.state.text, c.state.flag], ['stale: old figures', 'missing'])
    assert.match(c.state.title, /^last poll .+ ago$/)
    assert.equal(c.util.na, true)
    const zh = clusterNodeRows(cluster(), 'zh')[3].cells
    assert.equal(zh.state.text, '过期：数据陈旧')
  })
})

describe('cluster ranks', () => {
  test('by rank, with rate, step shares and the data wait flagged at the verdict threshold', () => {
    const rows = clusterRankRows(cluster().jobs[0], 'en')
    assert.deepEqual(rows.map((r) => r.rank), [0, 1, 2])
    assert.deepEqual(CLUSTER_RANK_COLUMNS.map((c) => c.key), ['rank', 'node', 'gpus', 'rate', 'dataWait', 'forward', 'optimizer', 'other', 'collectiveWait'])
    assert.deepEqual(Object.values(rows[0].cells).map((c) => c.text), ['0', 'node-a', '0', '9.5/s', '10 %', '30 %', '10 %', '20 %', '5 %'])
    assert.equal(rows[1].cells.rate.na, true)
    assert.deepEqual(rows.map((r) => r.cells.dataWait.flag), [null, null, 'high'])
    const unmeasured = clusterRankRows({ ranks: [rank({ collective_wait_fraction: null })] }, 'en')[0]
    assert.equal(unmeasured.cells.collectiveWait.na, true)
  })
})

describe('cluster view', () => {
  test("the status document's job when Prometheus knows its key, else every job", () => {
    const mine = clusterView(cluster(), { distributed: { job_key: 'run-7' } }, 'en')
    assert.equal(mine.matched, true)
    assert.deepEqual(mine.jobs.map((j) => j.key), ['run-7'])
    assert.equal(mine.jobs[0].title, 'Job run-7 · On GPU')
    assert.equal(mine.jobs[0].detail, '3 of 4 ranks on node-a, node-b')
    assert.equal(mine.jobs[0].warnings[0].message, 'Only 3 of the 4 ranks of job run-7 report (missing: 3).')
    const every = clusterView(cluster(), { distributed: null }, 'en')
    assert.equal(every.matched, false)
    assert.deepEqual(every.jobs.map((j) => j.key), ['run-7', 'node-a/200-1'])
    assert.equal(every.summary, '3 node(s) · 2 distributed job(s) · from http://prometheus:9090')
  })
  test('a job of more than one rank is distributed; any other gets one line, the others a count', () => {
    assert.equal(isDistributed({ job_key: 'run-7', world_size: 4, ranks: [0] }), true)
    assert.equal(isDistributed({ job_key: null, world_size: null, ranks: [0, 1] }), true) // rank 0 counts
    for (const run of [null, undefined, { job_key: 'slurm-9', world_size: 1, ranks: [0] }, { job_key: 'k', world_size: null, ranks: [] }]) {
      assert.equal(isDistributed(run), false, JSON.stringify(run))
    }
    const single = clusterView(cluster({ undistributed_jobs: 20 }), { distributed: null }, 'en')
    assert.equal(single.distributed, false)
    assert.equal(single.line, 'Cluster (from http://prometheus:9090): 3 node(s), 2 distributed job(s). This job is not distributed: it has no rows there.')
    assert.equal(single.undistributed, '20 job(s) of one process or one rank on one node are not listed.')
    assert.match(clusterView(cluster(), null, 'zh').line, /本作业不是分布式作业/)
    const run = clusterView(cluster(), { distributed: { job_key: 'run-7', world_size: 4 } }, 'en')
    assert.deepEqual([run.distributed, run.line, run.undistributed], [true, null, null])
  })
  test("another user's job under the same key is never the status document's", () => {
    const theirs = { job_key: 'run-7', uid: 65533, world_size: 8, nodes: ['node-a'], status: 'CPU', ranks: [rank({ rank: 1, job_id: '300-9' })], warnings: [] }
    const c = cluster({ jobs: [{ ...cluster().jobs[0], uid: 1000 }, theirs] })
    const mine = clusterView(c, { distributed: { job_key: 'run-7', uid: 1000 } }, 'en')
    assert.equal(mine.matched, true)
    assert.deepEqual(mine.jobs.map((j) => j.detail), ['3 of 4 ranks on node-a, node-b'])
    const attacker = clusterView(c, { distributed: { job_key: 'run-7', uid: 65533 } }, 'en')
    assert.deepEqual(attacker.jobs.map((j) => j.detail), ['1 of 8 ranks on node-a'])
    // An older sidecar's status document names no uid: every job of the key, each on its own.
    assert.equal(clusterView(c, { distributed: { job_key: 'run-7' } }, 'en').jobs.length, 2)
  })
  test('cluster warnings in the reader\'s language, English where the reference is absent', () => {
    const en = clusterView(cluster(), null, 'en').warnings
    assert.deepEqual(en.map((w) => [w.code, w.sev]), [['node-missing', 'warning']])
    assert.match(en[0].message, /node-c/)
    const zh = clusterView(cluster(), null, 'zh').warnings
    assert.notEqual(zh[0].message, en[0].message)
    const bare = clusterView(cluster({ warnings: [{ code: 'x', severity: 'info', message: 'plain', hint: null, message_ref: null, hint_ref: null }] }), null, 'en')
    assert.equal(bare.warnings[0].message, 'plain')
  })
  test('an empty or absent document gives empty tables', () => {
    assert.deepEqual(clusterView(null, null, 'en').nodes, [])
    assert.deepEqual(clusterView({ nodes: [], jobs: [] }, null, 'en').jobs, [])
  })
})
