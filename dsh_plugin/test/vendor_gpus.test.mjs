// AMD and Intel GPUs on the GPU cards (issue 41): the page and the panel read the same view model
// (sidecar/static/shared/view_model.js): a card per GPU whatever its vendor, no NVML-only text on an
// AMD card, each process's utilisation or why it cannot be told, and no second "not usable" card.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { efficiency } from '../../sidecar/static/shared/efficiency.js'
import { gpuCards } from '../../sidecar/static/shared/view_model.js'

const AMD_PCI = '0000:08:00.0'
const doc = {
  runtime: {},
  nvml: { ok: false, error: 'NVML Shared Library Not Found' },
  gpus: [
    { index: 0, vendor: 'amd', driver: 'amdgpu', name: 'AMD GPU', pci_bus_id: AMD_PCI, util_pct: null, mem_used_mib: null, mem_total_mib: null, framework_index: null, mig_devices: [] },
  ],
  system_gpus: [{ vendor: 'AMD', name: 'AMD GPU', pci: AMD_PCI, driver: 'amdgpu', nvml_index: null }],
  processes: [
    { pid: 7, role: 'main', gpu: [{ index: 0, vendor: 'amd', pci_bus_id: AMD_PCI, mem_used_mib: 512, sm_util_pct: null, unknown_reason: 'rocm-compute', mig_index: null }] },
    { pid: 8, role: 'main', gpu: [{ index: 0, vendor: 'amd', pci_bus_id: AMD_PCI, mem_used_mib: 2, sm_util_pct: 50, unknown_reason: null, mig_index: null }] },
  ],
}

test('an AMD GPU is a card of its own, with its vendor, driver and what cannot be told', () => {
  const vm = gpuCards(doc, 'en')
  assert.equal(vm.none, null)
  assert.deepEqual(vm.unusable, []) // listed among the GPUs: not a "not usable" device too
  const [card] = vm.cards
  assert.equal(card.vendor, 'AMD')
  assert.equal(card.title, 'GPU 0 · AMD')
  assert.equal(card.tag, null) // not "hidden from PyTorch": no CUDA mapping is read for it
  assert.match(card.framework, /amdgpu/)
  assert.deepEqual(card.procs.map((p) => [p.pid, p.mem, p.util]), [
    [7, '512 MiB', 'utilisation: not told for ROCm compute'],
    [8, '2 MiB', '50 %'],
  ])
  const util = card.meters.find((m) => m.key === 'util')
  assert.equal(util.pct, null) // not read: no bar, never 0
})

test('an NVIDIA card stays as it was', () => {
  const nv = { ...doc, gpus: [{ index: 0, name: 'H100', util_pct: 40, framework_index: 0, mig_devices: [] }], system_gpus: [], processes: [] }
  const [card] = gpuCards(nv, 'en').cards
  assert.equal(card.title, 'GPU 0')
  assert.equal(card.vendor, 'NVIDIA')
})

// The device's own figures (sysfs, poll/vendor_figures.py) and a ROCm job's model mapped to its card
// (the probe's PCI address: framework_index and model_gpu_index, as on NVIDIA).
const MI_PCI = '0000:c1:00.0'
const XE_PCI = '0000:04:00.0'
const figures = {
  runtime: { hip_build: '6.2.41133' },
  nvml: { ok: false, error: 'NVML Shared Library Not Found' },
  model_device: 'cuda:0',
  model_gpu_index: 0,
  gpus: [
    { index: 0, vendor: 'amd', driver: 'amdgpu', name: 'AMD GPU', pci_bus_id: MI_PCI, util_pct: 87, mem_used_mib: 81920, mem_total_mib: 196608, framework_index: 0, mig_devices: [], sm_clock_mhz: 1311, sm_clock_max_mhz: 2100, power_w: 412, power_limit_w: 750, temperature_c: 61, clock_event_reasons: null },
    { index: 1, vendor: 'intel', driver: 'xe', name: 'Intel GPU', pci_bus_id: XE_PCI, util_pct: null, mem_used_mib: null, mem_total_mib: 12288, framework_index: null, mig_devices: [], clock_event_reasons: ['sw_thermal_slowdown'] },
  ],
  system_gpus: [],
  processes: [
    { pid: 7, role: 'main', models: [{ name: 'Net', device: 'cuda:0' }], gpu: [{ index: 0, vendor: 'amd', pci_bus_id: MI_PCI, mem_used_mib: 4096, sm_util_pct: null, unknown_reason: 'rocm-compute', mig_index: null }] },
  ],
}

test("an AMD card shows its device's busy % and memory, and the ROCm model is on it", () => {
  const [mi, xe] = gpuCards(figures, 'en').cards
  const meter = (card, key) => card.meters.find((m) => m.key === key)
  assert.equal(meter(mi, 'util').pct, 87)
  assert.equal(meter(mi, 'util').value, '87 %')
  assert.ok(meter(mi, 'mem').pct > 41 && meter(mi, 'mem').pct < 42) // 80 of 192 GiB
  assert.equal(mi.modelHere, true)
  assert.match(mi.framework, /sysfs/)
  // Intel: no busy figure from its driver, said so (never 0 %, never a bare n/a)
  assert.equal(meter(xe, 'util').pct, null)
  assert.equal(meter(xe, 'util').value, 'none: xe reports no utilisation')
  assert.equal(xe.modelHere, false)
})

test("the efficiency strip shows the AMD model GPU's clocks, power and temperature", () => {
  const eff = efficiency(figures, 'en')
  const items = Object.fromEntries(eff.gpu.items.map((i) => [i.key, i.value]))
  assert.match(items.clock, /1311/)
  assert.match(items.power, /412/)
  assert.match(items.temp, /61/)
})

// Who else uses a laptop's iGPU (issue 41 item 7): the card names them, in English and Chinese; an
// NVIDIA card, whose other processes are not named, says nothing new.
test('an Intel card says who else uses it; none named on NVIDIA', () => {
  const igpu = { index: 1, vendor: 'intel', driver: 'i915', name: 'Intel GPU', pci_bus_id: '0000:00:02.0', util_pct: null, mem_used_mib: null, mem_total_mib: null, framework_index: null, mig_devices: [], other_process_count: 12, other_process_names: ['Xorg', 'firefox'], other_process_names_omitted: 0 }
  const nv = { index: 0, name: 'RTX 4070 Laptop', util_pct: 40, framework_index: 0, mig_devices: [], other_process_count: 1, other_process_names: null }
  const laptop = { ...doc, gpus: [nv, igpu], system_gpus: [], processes: [] }
  const [nvCard, card] = gpuCards(laptop, 'en').cards
  assert.equal(card.others, 'Also used by Xorg, firefox')
  assert.equal(nvCard.others, null)
  assert.equal(gpuCards(laptop, 'zh').cards[1].others, '其他使用者：Xorg, firefox')
  const many = { ...laptop, gpus: [{ ...igpu, other_process_names_omitted: 3 }] }
  assert.equal(gpuCards(many, 'en').cards[0].others, 'Also used by Xorg, firefox and 3 more')
  const alone = { ...laptop, gpus: [{ ...igpu, other_process_count: 0, other_process_names: [] }] }
  assert.equal(gpuCards(alone, 'en').cards[0].others, 'No other process uses it')
})

// The card the model is on says so on every vendor's card: a ROCm model's AMD GPU (framework_index)
// and an XPU model's Intel GPU (model_gpu_index: xpu:N is not CUDA's numbering).
test("an AMD or Intel card where the model is says 'model here'; no other tag", () => {
  const [mi, xe] = gpuCards(figures, 'en').cards
  assert.deepEqual(mi.tag, { kind: 'model', text: 'model here' })
  assert.equal(xe.tag, null)
  const igpu = { index: 1, vendor: 'intel', driver: 'i915', name: 'Intel GPU', pci_bus_id: '0000:00:02.0', util_pct: null, mem_used_mib: null, mem_total_mib: null, framework_index: null, mig_devices: [] }
  const nv = { index: 0, name: 'RTX 4070 Laptop', util_pct: 0, framework_index: null, mig_devices: [] }
  const xpu = { ...doc, model_device: 'xpu:0', model_gpu_index: 1, gpus: [nv, igpu], system_gpus: [], processes: [] }
  const [nvCard, igpuCard] = gpuCards(xpu, 'en').cards
  assert.equal(igpuCard.modelHere, true)
  assert.deepEqual(igpuCard.tag, { kind: 'model', text: 'model here' })
  assert.equal(nvCard.modelHere, false) // NVIDIA's cards still read CUDA's numbering alone
})

// Memory a driver does not tell is said so, never a bare n/a: an i915 iGPU has none of its own; an xe
// card's total is known, its use not.
test("an AMD or Intel card's memory the driver does not tell is said so", () => {
  const mem = (g, lang = 'en') => gpuCards({ ...doc, gpus: [g], processes: [] }, lang).cards[0].meters.find((m) => m.key === 'mem')
  const igpu = { index: 0, vendor: 'intel', driver: 'i915', util_pct: null, mem_used_mib: null, mem_total_mib: null, mig_devices: [] }
  assert.equal(mem(igpu).value, 'none: i915 reports no memory use')
  assert.equal(mem(igpu).pct, null)
  assert.equal(mem(igpu, 'zh').value, '无：i915 不提供显存用量')
  assert.equal(mem({ ...igpu, driver: 'xe', mem_total_mib: 12288 }).value, 'use not told (of 12 GiB)')
  assert.equal(mem({ ...igpu, vendor: 'amd', driver: 'amdgpu', mem_used_mib: 2048, mem_total_mib: 24576 }).value, '2 GiB of 24 GiB')
  // NVIDIA's unknown memory is as it was
  assert.equal(mem({ index: 0, name: 'H100', util_pct: 1, mem_used_mib: null, mem_total_mib: 81920, mig_devices: [] }).value.endsWith('of 80 GiB'), true)
})
