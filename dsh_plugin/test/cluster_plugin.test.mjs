// The plugin's cluster part: the GPU view's cluster section (src/client/cluster.jsx) rendered without
// React (test/jsx-shim.mjs), what one fetch of /api/cluster does to it (nextCluster), and the host's
// `prometheusUrl` setting and /api/cluster route (host/core.js, host/autostart.js).
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { render } from './jsx-shim.mjs'
import { normalizeConfig, resolveRoute } from '../host/core.js'
import { sidecarArgsOf } from '../host/autostart.js'

const here = dirname(fileURLToPath(import.meta.url))
let mod
let dir

before(async () => {
  const out = await build({
    absWorkingDir: resolve(here, '..'),
    entryPoints: ['src/client/cluster.jsx'],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'neutral',
    jsx: 'automatic',
    alias: { 'react/jsx-runtime': join(here, 'jsx-shim.mjs'), react: join(here, 'react-stub.mjs') },
    logLevel: 'silent',
  })
  dir = mkdtempSync(join(tmpdir(), 'dgd-cluster-'))
  const file = join(dir, 'cluster.mjs')
  writeFileSync(file, out.outputFiles[0].text)
  mod = await import(pathToFileURL(file).href)
})
after(() => rmSync(dir, { recursive: true, force: true }))

const gpu = (over = {}) => ({ index: 0, uuid: 'GPU-0', name: 'NVIDIA H100', util_pct: 90, mem_used_mib: 20480, mem_total_mib: 81920, sm_clock_mhz: 1980, sm_activity_fraction: 0.7, clock_events: [], ...over })
const cluster = {
  schema: 2, time_unix_s: 1, prometheus: 'http://p:9090', job: null,
  nodes: [
    { node: 'node-a', reporting: true, why: null, poll_age_s: 1, gpus: [gpu({ clock_events: ['hw_slowdown'] }), gpu({ index: 1 })] },
    { node: 'node-c', reporting: false, why: 'down', poll_age_s: null, gpus: [] },
  ],
  jobs: [{ job_key: 'run-7', world_size: 2, nodes: ['node-a'], status: 'GPU', warnings: [], ranks: [{ rank: 0, local_rank: 0, node: 'node-a', job_id: '1-2', gpus: [0], forward_rate_per_s: 3, data_wait_fraction: 0.7, forward_fraction: 0.1, optimizer_fraction: 0.1, other_fraction: 0.1 }] }],
  warnings: [{ code: 'node-missing', severity: 'warning', message: 'Node node-c stopped', hint: null, message_ref: { id: 'warning.node-missing.down', params: { node: 'node-c', age: '?' } }, hint_ref: null }],
}

describe('cluster section', () => {
  test('both tables, the missing node marked, the slow reason and the flagged data wait', () => {
    const html = render(mod.ClusterTables({ cluster, doc: { distributed: { job_key: 'run-7', world_size: 2, ranks: [0] } }, error: null, lang: 'en' }))
    assert.equal((html.match(/data-testid="dsh-gpu-cluster-node"/g) || []).length, 3)
    assert.match(html, /data-node="node-c" data-reporting="false"/)
    assert.match(html, /data-flag="missing"[^>]*>missing: the scrape fails</)
    assert.match(html, /data-reason="hw_slowdown"[^>]*>hardware slowdown</)
    assert.match(html, /data-testid="dsh-gpu-cluster-rank" data-rank="0"/)
    assert.match(html, /data-col="dataWait"[^>]*data-flag="high"[^>]*>70 %</)
    assert.match(html, /data-code="node-missing"/)
    assert.match(html, /Job run-7 · On GPU/)
  })
  test('an error is shown with the last tables; zh words', () => {
    const html = render(mod.ClusterTables({ cluster, doc: { distributed: { job_key: 'run-7', world_size: 2 } }, error: 'Prometheus did not answer: x', lang: 'zh' }))
    assert.match(html, /data-testid="dsh-gpu-cluster-error"/)
    assert.match(html, /缺失：抓取失败/)
  })
  test('a job that is not distributed: one line, no tables (issue 39 item 3)', () => {
    const many = { ...cluster, undistributed_jobs: 22 }
    for (const doc of [null, { distributed: null }, { distributed: { job_key: 'slurm-9', world_size: 1, ranks: [0] } }]) {
      const html = render(mod.ClusterTables({ cluster: many, doc, error: null, lang: 'en' }))
      assert.doesNotMatch(html, /<table|dsh-gpu-cluster-job|dsh-gpu-cluster-rank|No rank reports/)
      assert.equal((html.match(/data-testid="dsh-gpu-cluster-line"/g) || []).length, 1, html)
      assert.match(html, /Cluster \(from http:\/\/p:9090\): 2 node\(s\), 1 distributed job\(s\)\. This job is not distributed/)
    }
    const failed = render(mod.ClusterTables({ cluster: many, doc: null, error: 'refused', lang: 'en' }))
    assert.doesNotMatch(failed, /<table/)
    assert.match(failed, /data-testid="dsh-gpu-cluster-line">Prometheus did not answer: refused</)
    assert.equal(mod.ClusterTables({ cluster: null, doc: null, error: null, lang: 'en' }), null)
    // a distributed job Prometheus does not know: every distributed job, the others counted in a line
    const other = render(mod.ClusterTables({ cluster: many, doc: { distributed: { job_key: 'run-9', world_size: 2 } }, error: null, lang: 'en' }))
    assert.match(other, /data-testid="dsh-gpu-cluster-job" data-job-key="run-7"/)
    assert.match(other, /data-testid="dsh-gpu-cluster-undistributed">22 job\(s\) of one process or one rank on one node are not listed\.</)
  })
  test('one fetch: 200 shows, 404 hides, 503 keeps, 502 shows its error', () => {
    const none = { shown: false, cluster: null, error: null }
    const shown = mod.nextCluster(none, 200, cluster)
    assert.deepEqual([shown.shown, shown.cluster === cluster, shown.error], [true, true, null])
    assert.deepEqual(mod.nextCluster(shown, 404, { error: 'no cluster view' }), none)
    assert.equal(mod.nextCluster(shown, 503, {}), shown)
    const failed = mod.nextCluster(none, 502, { error: 'Prometheus did not answer: refused' })
    assert.deepEqual([failed.shown, failed.error], [true, 'Prometheus did not answer: refused'])
  })
})

describe('host: prometheusUrl and the cluster route', () => {
  test('prometheusUrl is passed to the started sidecar as --prometheus; a bad one warns and is dropped', () => {
    const { config, warnings } = normalizeConfig({ prometheusUrl: 'http://prometheus.example:9090/', sidecarArgs: ['--interval', '1'] })
    assert.deepEqual(warnings, [])
    assert.equal(config.prometheusUrl, 'http://prometheus.example:9090')
    assert.deepEqual(sidecarArgsOf(config), ['--interval', '1', '--prometheus', 'http://prometheus.example:9090'])
    for (const bad of ['ftp://p:9090', 'http://user:pw@p:9090', 'http://p:9090/?q=1', 42]) {
      const r = normalizeConfig({ prometheusUrl: bad })
      assert.equal(r.config.prometheusUrl, null, String(bad))
      assert.match(r.warnings.join(' '), /prometheusUrl/)
    }
    assert.deepEqual(sidecarArgsOf(normalizeConfig({}).config), [])
  })
  test('/api/cluster forwards a job key, nothing else', () => {
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/cluster?job=run-7&x=1'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/cluster?job=run-7' })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/cluster?job=a%20b'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/cluster' })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/cluster'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/cluster' })
  })
})
