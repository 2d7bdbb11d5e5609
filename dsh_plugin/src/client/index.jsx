// Browser half of the dsh-gpu-dashboard DSH plugin (DSH 0.1.0-rc.8 web shell).
//
// Registers four slot entries, each on its own and each inside try/catch, so that nothing here can
// block DSH's boot or another plugin ("Failed to load plugins" takes the whole page down):
//   sidebar.footer.action  status chip (colour + GPU/CPU + utilisation), toggles the glance card
//   shell.overlay          the glance card (status, message, first warnings, per-GPU bars)
//   conversation.view      the "GPU" tab in a session: GPU cards, process table, history charts
//   settings.section       sidecar URL (host config snippet), refresh interval, connection state
// Only `slots` is injected; only `react` / `react/jsx-runtime` come from the shell's module table.
import { GlanceCard, GpuView, SettingsSection, StatusChip, guarded } from './components.jsx'
import { t } from '../../../sidecar/static/shared/format.js'
import { getStore } from './store.js'
import { ensureStyle } from './styles.js'

export const name = 'dsh-gpu-dashboard'
export const inject = ['slots']

const ENTRIES = [
  {
    slot: 'sidebar.footer.action',
    options: { id: 'dsh-gpu-dashboard-chip', order: 50 },
    component: guarded(StatusChip, 'chip', true),
  },
  {
    slot: 'shell.overlay',
    options: { id: 'dsh-gpu-dashboard-glance', order: 50 },
    component: guarded(GlanceCard, 'glance card'),
  },
  {
    slot: 'conversation.view',
    options: { id: 'dsh-gpu-dashboard', order: 50, label: () => t(getStore().lang(), 'plugin.viewLabel') },
    component: guarded(GpuView, 'GPU view'),
  },
  {
    slot: 'settings.section',
    options: { id: 'dsh-gpu-dashboard', order: 80, label: () => t(getStore().lang(), 'plugin.name') },
    component: guarded(SettingsSection, 'settings'),
  },
]

function report(message, err) {
  try {
    console.error(`[dsh-gpu-dashboard] ${message}`, err)
  } catch {
    /* nothing left */
  }
}

/** Registered entries and failures, for diagnostics (window.__dshGpuDashboard). */
export const registrations = { ok: [], failed: [] }

export function apply(ctx) {
  try {
    ensureStyle()
  } catch (err) {
    report('could not add styles', err)
  }
  try {
    if (typeof window !== 'undefined') window.__dshGpuDashboard = { registrations, version: '0.1.0' }
  } catch {
    /* diagnostics only */
  }
  for (const entry of ENTRIES) {
    try {
      ctx.slots.inject(entry.slot, () => {
        try {
          const dispose = ctx.slots.register({ name: entry.slot, ...entry.options }, entry.component)
          registrations.ok.push(entry.slot)
          return typeof dispose === 'function' ? dispose : () => {}
        } catch (err) {
          registrations.failed.push({ slot: entry.slot, error: String((err && err.message) || err) })
          report(`could not register into ${entry.slot}`, err)
          return () => {}
        }
      })
    } catch (err) {
      registrations.failed.push({ slot: entry.slot, error: String((err && err.message) || err) })
      report(`could not wait for slot ${entry.slot}`, err)
    }
  }
}
