// AMD and Intel GPUs on the GPU cards (issue 41): the page and the panel read the same view model
// (sidecar/static/shared/view_model.js): a card per GPU whatever its vendor, no NVML-only text on an
// AMD card, each process's utilisation or why it cannot be told, and no second "not usable" card.
import assert from 'node:assert/strict'
import { test } from 'node:test'
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
