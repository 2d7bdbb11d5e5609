// React components of the DSH plugin, one module per thing shown. Wording, colours and number formats
// come from the shared sidecar/static/shared/format.js (the standalone page uses the same module); the history
// charts reuse the standalone page's sidecar/static/shared/charts.js (TimeChart) through a ref.
export { PLUGIN_VERSION, SUPPORTED_DSH } from './shared.jsx'
export { Boundary, ErrorCard, Unreachable, guarded } from './errors.jsx'
export { StatusChip } from './chip.jsx'
export { GlanceCard } from './glance.jsx'
export { GpuView } from './view.jsx'
export { SettingsSection } from './settings.jsx'
