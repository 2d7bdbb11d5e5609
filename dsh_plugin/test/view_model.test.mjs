// The shared view model (sidecar/static/shared/view_model.js): the cells the page and the plugin lay out.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  DATA_WAIT_HIGH_FRACTION, PROCESS_COLUMNS, gpuCard, gpuCards, heroFacts, processRow, processRows, runtimeFacts,
} from '../../sidecar/static/shared/view_model.js'

const model = (over = {}) => ({ name: 'net', device: 'cuda:0', devices: ['cuda:0'], input_device: 'cuda:0', param_count: 11_689_512, forward_rate_hz: 12.5, data_wait_fraction: null, ...over })
const proc = (over = {}) => ({ pid: 42, ppid: null, role: 'main', has_probe: true, name: 'python', cpu_pct: 97, models: [model()], gpu: [{ index: 0, mem_used_mib: 1024, sm_util_pct: 80, mig_index: null }], ...over })
const gpu = (over = {}) => ({ index: 0, uuid: 'GPU-0', name: 'NVIDIA H100', util_pct: 90, mem_used_mib: 2048, mem_total_mib: 81920, framework_index: 0, mig_mode: false, mig_devices: [], ...over })
const doc = (over = {}) => ({ schema: 2, model_device: 'cuda:0', input_device: 'cuda:0', model_gpu_index: 0, gpus: [gpu()], processes: [proc()], runtime: { torch: '2.13.0', cuda_build: '12.8', cuda_available: true, device_count: 1 }, nvml: { ok: true, driver: '560.35' }, interval_s: 1, ...over })

describe('process rows', () => {
  test('children under their parent, by pid, with their branch; columns in order', () => {
    const d = doc({ processes: [proc({ pid: 9, ppid: 1, role: 'dataloader-worker', worker_id: 1 }), proc({ pid: 1 }), proc({ pid: 5, ppid: 1, role: 'dataloader-worker', worker_id: 0 })] })
    assert.deepEqual(processRows(d, 'en').map((r) => [r.pid, r.depth, r.branch]), [[1, 0, null], [5, 1, '├─'], [9, 1, '└─']])
    assert.deepEqual(PROCESS_COLUMNS.map((c) => c.key), ['process', 'role', 'models', 'inputs', 'gpuMem', 'sm', 'cpu', 'dataWait'])
  })
  test('each model with its device; input devices once each; memory summed over GPUs', () => {
    const p = proc({ models: [model(), model({ name: 'head', input_device: 'cpu', forward_rate_hz: null }), model({ name: 'aux' })], gpu: [{ index: 0, mem_used_mib: 1024 }, { index: 1, mem_used_mib: 512 }] })
    const c = processRow(doc(), p, 'en').cells
    assert.deepEqual(c.models.items.map((m) => [m.device.text, m.label]), [['cuda:0', 'net · 11.7 M params · 13/s'], ['cuda:0', 'head · 11.7 M params'], ['cuda:0', 'aux · 11.7 M params · 13/s']])
    assert.deepEqual(c.inputs.items.map((d) => d.text), ['cuda:0', 'cpu'])
    assert.equal(c.gpuMem.text, '1.5 GiB')
    assert.equal(c.gpuMem.title, 'GPU 0: 1 GiB\nGPU 1: 512 MiB')
  })
  test("data wait: the step breakdown's, else the highest of the models', flagged at the verdict's threshold", () => {
    const steps = { window_s: 10, steps: 50, data_wait_fraction: DATA_WAIT_HIGH_FRACTION }
    const withSteps = processRow(doc(), proc({ step_breakdown: steps, models: [model({ data_wait_fraction: 0.9, data_wait_batches: 64 })] }), 'en').cells.dataWait
    assert.deepEqual(withSteps, { value: '50 %', window: 'last 10 s', source: 'steps', flag: 'high', na: false })
    const models = [model({ data_wait_fraction: 0.1, data_wait_batches: 64 }), model({ data_wait_fraction: 0.3, data_wait_batches: 12 })]
    const byModels = processRow(doc(), proc({ models }), 'en').cells.dataWait
    assert.deepEqual(byModels, { value: '30 %', window: 'last 12 batches', source: 'batches', flag: null, na: false })
    assert.equal(processRow(doc(), proc(), 'en').cells.dataWait.na, true)
  })
  test('no probe, exited, probe error and absent values', () => {
    const c = processRow(doc(), { pid: 7, has_probe: false, exited: true, probe_error: 'busy', models: [], gpu: [] }, 'en').cells
    assert.deepEqual(c.role, { text: 'no probe', probed: false, title: c.role.title })
    assert.match(c.role.title, /probe is not loaded/)
    assert.equal(c.process.exited.text, 'exited')
    assert.match(c.process.probeError, /busy/)
    for (const k of ['models', 'inputs', 'gpuMem', 'sm', 'cpu', 'dataWait']) assert.equal(c[k].na, true, k)
    assert.equal(c.process.name, '—')
  })
  test('in Chinese', () => {
    const c = processRow(doc(), { pid: 7, has_probe: false, models: [], gpu: [] }, 'zh').cells
    assert.notEqual(c.role.text, 'no probe')
  })
})

describe('GPU cards', () => {
  test("model here on every GPU a model of the job is on, not only the document's model device", () => {
    const d = doc({ gpus: [gpu(), gpu({ index: 1, uuid: 'GPU-1', framework_index: 1 })], processes: [proc(), proc({ pid: 43, role: 'rank', rank: 1, models: [model({ device: 'cuda:1' })], gpu: [{ index: 1, mem_used_mib: 100 }] })] })
    const cards = gpuCards(d, 'en').cards
    assert.deepEqual(cards.map((c) => [c.modelHere, c.tag && c.tag.kind]), [[true, 'model'], [true, 'model']])
    assert.deepEqual(cards[1].procs, [{ pid: 43, role: 'rank 1', mem: '100 MiB' }])
  })
  test('the hidden tag only when PyTorch could see CUDA but not this GPU; framework words', () => {
    const noProbe = doc({ runtime: {} })
    const c = gpuCard(noProbe, gpu({ framework_index: null }), 'en')
    assert.equal(c.tag, null)
    assert.equal(c.framework, 'PyTorch’s view unknown (no probe)')
    const hidden = doc({ runtime: { torch: '2.13.0', cuda_build: '12.8', cuda_available: true, cuda_visible_devices: '1' } })
    assert.equal(gpuCard(hidden, gpu({ framework_index: null }), 'en').tag.text, 'hidden')
  })
  test('a process in two MIG instances: listed once, with its memory over both', () => {
    const g = gpu({ mig_mode: true, util_pct: null, mig_devices: [{ index: 0, gpu_instance_id: 1, compute_instance_id: 0, mem_used_mib: 10, mem_total_mib: 9856 }, { index: 1, gpu_instance_id: 2, compute_instance_id: 0, mem_used_mib: 20, mem_total_mib: 9856 }] })
    const p = proc({ gpu: [{ index: 0, mem_used_mib: 10, mig_index: 0 }, { index: 0, mem_used_mib: 20, mig_index: 1 }] })
    const c = gpuCard(doc({ gpus: [g], processes: [p] }), g, 'en')
    assert.deepEqual(c.procs, [{ pid: 42, role: 'main', mem: '30 MiB' }])
    assert.deepEqual(c.mig.rows.map((r) => r.pidsText), ['pid 42', 'pid 42'])
    assert.equal(c.meters[0].value, 'n/a on MIG')
  })
  test('no NVIDIA GPU: the none card with NVML’s error, the iGPU beside it', () => {
    const d = doc({ gpus: [], nvml: { ok: false, error: 'NVML Shared Library Not Found' }, system_gpus: [{ pci: '0000:00:02.0', vendor: 'Intel', name: 'Iris', driver: 'i915', nvml_index: null }] })
    const vm = gpuCards(d, 'en')
    assert.equal(vm.none.text, 'No NVIDIA GPU visible to NVML.')
    assert.match(vm.none.error, /NVML Shared Library Not Found/)
    assert.deepEqual(vm.unusable.map((c) => [c.vendor, c.name, c.meta]), [['Intel', 'Iris', 'PCI 0000:00:02.0 · driver i915']])
  })
})

describe('summary facts and runtime footer', () => {
  test('the facts in order, devices as chips', () => {
    const f = heroFacts(doc(), 'en')
    assert.deepEqual(f.map((x) => [x.key, x.text]), [['model-device', 'cuda:0'], ['input-device', 'cuda:0'], ['util', '90 %'], ['mem', '2 GiB'], ['cuda', f[4].text]])
    assert.equal(f[0].chip.kind, 'cuda')
  })
  test("the pod: the kubelet's name, a process's own claim as self-reported, the container's short id with the full one in the title", () => {
    const cid = '0123456789ab' + 'cd'.repeat(26)
    const pod = (over) => heroFacts(doc({ pod: { namespace: 'research', pod: 'trainer-0', uid: 'u-1', container: 'pytorch', container_id: cid, source: 'kubelet', ...over } }), 'en').find((f) => f.key === 'pod')
    assert.deepEqual([pod().text, pod().title], ['research/trainer-0 · container pytorch (0123456789ab)', `pod UID u-1 · container id ${cid}`])
    // What the process says of itself (POD_NAME, its hostname) is its claim, not the kubelet's.
    assert.equal(pod({ namespace: 'team-b', pod: 'victim-pod', container: null, source: 'self-reported' }).text, 'team-b/victim-pod (self-reported) · container 0123456789ab')
    // No kubelet answered: the cgroup's UID and container id alone.
    assert.equal(pod({ namespace: null, pod: null, container: null, source: 'cgroup' }).text, 'unnamed pod u-1 · container 0123456789ab')
    // A document without the id (an older sidecar): no title.
    assert.deepEqual([pod({ container_id: undefined }).text, pod({ container_id: undefined }).title], ['research/trainer-0 · container pytorch', null])
  })
  test('every item, absent ones as —; a CPU-only build flagged', () => {
    const r = runtimeFacts(doc({ runtime: { torch: '2.13.0+cpu', cuda_build: null } }), 'en')
    assert.deepEqual(r.items.map((i) => [i.key, i.value, i.bad]), [['torch', '2.13.0+cpu', false], ['cuda-build', r.items[1].value, true], ['cudnn', '—', false], ['visible', '—', false], ['driver', '560.35', false], ['cuda-driver', '—', false]])
    assert.equal(r.error, null)
    assert.match(r.interval, /1/)
  })
})
