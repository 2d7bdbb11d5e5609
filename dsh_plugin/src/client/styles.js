// Plugin CSS, injected once as <style id="dsh-gpu-dashboard-style">. Every colour that is not a
// status/severity/utilisation colour from format.js comes from DSH's theme variables, so the panel
// follows DSH's light and dark themes. Class names are prefixed dgd- to stay out of DSH's way.
export const STYLE_ID = 'dsh-gpu-dashboard-style'

export const CSS = `
.dgd-root, .dgd-root * { box-sizing: border-box; }
.dgd-root { color: var(--dsw-alias-label-primary, #1f2328); font-family: inherit; font-size: 13px; line-height: 1.45; }
.dgd-muted { color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-mono { font-family: var(--dsh-font-mono, ui-monospace, SFMono-Regular, Menlo, Consolas, monospace); }

/* ---- sidebar chip */
.dgd-chip { display: inline-flex; align-items: center; gap: 8px; width: calc(100% + 4px); height: 42px; margin: 8px -2px 0;
  padding: 0 10px 0 8px; border: none; border-radius: 12px; background: transparent; cursor: pointer; overflow: hidden;
  color: var(--dsw-alias-label-primary, #1f2328); font: inherit; font-size: 14px; }
.dgd-chip:hover, .dgd-chip[aria-expanded="true"] { background: var(--dsw-alias-interactive-bg-hover, rgba(0,0,0,.05)); }
.dgd-chip.dgd-rail { width: 36px; height: 36px; margin: 0; padding: 0; gap: 0; justify-content: center; border-radius: 50%; }
.dgd-chip-icon { position: relative; flex: none; width: 20px; height: 20px; display: inline-flex; align-items: center; justify-content: center; }
.dgd-chip-icon svg { width: 20px; height: 20px; fill: none; stroke: currentColor; stroke-width: 1.6; }
.dgd-chip-dot { position: absolute; right: -2px; bottom: -1px; width: 9px; height: 9px; border-radius: 50%;
  box-shadow: 0 0 0 2px var(--dsw-specific-sidebar-fill, var(--dsw-alias-bg-base, #fff)); }
.dgd-chip-label { font-weight: 600; white-space: nowrap; padding: 1px 7px; border-radius: 999px; font-size: 12px; line-height: 18px; }
.dgd-chip-util { margin-left: auto; flex: none; color: var(--dsw-alias-label-tertiary, #656d76); font-size: 12px; font-variant-numeric: tabular-nums; }
.dgd-chip-text { min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }

.dgd-chip-jobs { flex: none; padding: 0 6px; border: 1.5px solid; border-radius: 999px; font-size: 11px; line-height: 16px;
  color: var(--dsw-alias-label-secondary, #59636e); white-space: nowrap; }

/* ---- the session's jobs (GPU tab) */
.dgd-jobs { flex: none; }
.dgd-jobs-title { margin: 0 0 6px; font-size: 13px; font-weight: 600; }
.dgd-jobs-list { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 4px; }
.dgd-job { display: flex; align-items: center; gap: 10px; width: 100%; padding: 6px 10px; border-radius: 10px; cursor: pointer; text-align: left;
  border: 1px solid var(--dsw-alias-border-l2, #e3e6ea); background: transparent; color: inherit; font: inherit; }
.dgd-job:hover { background: var(--dsw-alias-interactive-bg-hover, rgba(0,0,0,.05)); }
.dgd-job-on { border-color: var(--dsw-alias-label-secondary, #59636e); }
.dgd-job-status { flex: none; font-weight: 700; font-size: 11px; padding: 1px 7px; border-radius: 999px; }
.dgd-job-pid { flex: none; }
.dgd-job-cmd { min-width: 0; flex: 1; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dgd-job-link { flex: none; font-size: 12px; }
.dgd-jobs-exited { margin-top: 4px; }
.dgd-jobs-exited > summary { cursor: pointer; width: max-content; padding: 2px 10px; font-size: 12px; }
.dgd-jobs-exited[open] > summary { margin-bottom: 4px; }

/* ---- glance card (shell.overlay) */
.dgd-glance { position: fixed; left: 12px; bottom: 64px; z-index: 30; pointer-events: auto; width: 380px; max-width: calc(100vw - 24px);
  max-height: min(560px, calc(100vh - 88px)); overflow-y: auto; border-radius: 14px; padding: 14px 14px 12px;
  background: var(--dsw-specific-menu, var(--dsw-alias-bg-layer-2, #fff)); border: 1px solid var(--dsw-alias-border-inverted, var(--dsw-alias-border-l2, #e3e6ea));
  box-shadow: var(--dsw-shadow-lv3, 0 8px 28px rgba(0,0,0,.18)); display: flex; flex-direction: column; gap: 10px; }
.dgd-glance-head { display: flex; align-items: center; gap: 8px; }
.dgd-glance-title { font-size: 14px; font-weight: 600; }
.dgd-close { margin-left: auto; width: 28px; height: 28px; border: none; border-radius: 999px; background: transparent; cursor: pointer;
  color: var(--dsw-alias-label-tertiary, #656d76); font-size: 18px; line-height: 1; }
.dgd-close:hover { background: var(--dsw-alias-interactive-bg-hover, rgba(0,0,0,.05)); color: var(--dsw-alias-label-primary, #1f2328); }

/* ---- status badge, message, warnings */
.dgd-badge { display: inline-flex; align-items: center; gap: 8px; padding: 4px 12px; border-radius: 999px; font-weight: 700; font-size: 14px; white-space: nowrap; }
.dgd-badge-big { font-size: 20px; padding: 8px 18px; }
.dgd-badge-dot { width: 8px; height: 8px; border-radius: 50%; background: currentColor; opacity: .85; }
.dgd-message { margin: 0; font-size: 14px; color: var(--dsw-alias-label-primary, #1f2328); }
.dgd-hero .dgd-message { font-size: 16px; }
.dgd-warnings { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: 6px; }
.dgd-warning { border-left: 3px solid; border-radius: 6px; padding: 6px 10px; background: var(--dsw-alias-bg-layer-1, rgba(0,0,0,.03)); }
.dgd-warning-msg { font-weight: 500; }
.dgd-warning-sev { font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .03em; margin-right: 6px; }
.dgd-warning-hint { color: var(--dsw-alias-label-secondary, #4b5563); font-size: 12px; margin-top: 2px; }
.dgd-updated { font-size: 11.5px; color: var(--dsw-alias-label-tertiary, #656d76); }

/* ---- meters */
.dgd-meters { display: flex; flex-direction: column; gap: 8px; }
.dgd-meter { display: grid; grid-template-columns: 84px minmax(60px, 1fr) 124px; align-items: center; gap: 8px; font-size: 12px; }
.dgd-meter-label { color: var(--dsw-alias-label-secondary, #4b5563); overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dgd-bar { position: relative; height: 8px; border-radius: 999px; background: var(--dsw-alias-border-l2, #e5e7eb); overflow: hidden; }
.dgd-meter[data-unknown] .dgd-bar { background: repeating-linear-gradient(135deg, var(--dsw-alias-border-l2, #e5e7eb) 0 4px, transparent 4px 8px); box-shadow: inset 0 0 0 1px var(--dsw-alias-border-l2, #e5e7eb); }
.dgd-bar > i { position: absolute; left: 0; top: 0; bottom: 0; border-radius: 999px; }
.dgd-meter-value { font-variant-numeric: tabular-nums; color: var(--dsw-alias-label-primary, #1f2328); min-width: 56px; text-align: right; }
.dgd-glance-gpu { display: flex; flex-direction: column; gap: 4px; }
.dgd-glance-gpu-name { font-size: 12px; font-weight: 600; }

/* ---- full view (conversation.view) */
/* bottom padding: the session's composer floats over the lower part of every view */
.dgd-view { height: 100%; overflow-y: auto; padding: 18px 22px 180px; display: flex; flex-direction: column; gap: 18px;
  background: var(--dsw-alias-bg-base, transparent); }
.dgd-section-title { margin: 0 0 8px; font-size: 13px; font-weight: 600; color: var(--dsw-alias-label-secondary, #4b5563); text-transform: none; }
.dgd-compare { display: flex; flex-direction: column; gap: 6px; margin-top: 10px; }
.dgd-compare-list { margin: 0; padding-left: 18px; }
.dgd-compare-list li { margin: 2px 0; }
.dgd-run-compare { font: inherit; font-size: 12px; padding: 2px 8px; border-radius: 6px; border: 1px solid var(--dsw-alias-border-l2, #e3e6ea); background: transparent; color: inherit; cursor: pointer; white-space: nowrap; }
.dgd-card { background: var(--dsw-alias-bg-layer-1, #fff); border: 1px solid var(--dsw-alias-border-l2, #e3e6ea); border-radius: 12px; padding: 14px 16px; min-width: 0; }
.dgd-hero { display: flex; flex-direction: column; gap: 12px; }
.dgd-hero-main { display: flex; align-items: center; gap: 16px; flex-wrap: wrap; }
.dgd-hero-text { flex: 1; min-width: 220px; display: flex; flex-direction: column; gap: 2px; }
.dgd-facts { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 8px 16px; margin: 0; }
.dgd-facts div { min-width: 0; }
.dgd-facts dt { font-size: 11.5px; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-facts dd { margin: 0; font-size: 15px; font-weight: 600; font-variant-numeric: tabular-nums; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dgd-gpu-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 12px; }
.dgd-gpu-head { display: flex; align-items: baseline; gap: 8px; margin-bottom: 10px; flex-wrap: wrap; }
.dgd-gpu-index { font-weight: 700; }
.dgd-gpu-name { font-weight: 600; min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.dgd-tag { display: inline-block; font-size: 11px; line-height: 16px; padding: 1px 7px; border-radius: 999px; white-space: nowrap;
  background: var(--dsw-alias-button-ghost-active-fill, rgba(0,0,0,.06)); color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-tag-ok { background: var(--dsw-alias-state-success-tertiary, #dcfce7); color: var(--dsw-alias-state-success-primary, #15803d); }
.dgd-tag-warn { background: var(--dsw-alias-state-warn-tertiary, #fef3c7); color: var(--dsw-alias-state-warn-label, #92400e); }
.dgd-gpu-foot { margin-top: 10px; font-size: 12px; color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-gpu-procs { list-style: none; margin: 4px 0 0; padding: 0; display: flex; flex-direction: column; gap: 2px; }
.dgd-gpu-procs li { display: flex; flex-wrap: wrap; gap: 0 8px; }
.dgd-gpu-procs li b { margin-left: auto; font-weight: 500; font-variant-numeric: tabular-nums; white-space: nowrap; }
.dgd-gpu-proc-util { white-space: nowrap; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-table-wrap { overflow-x: auto; padding: 0; }
.dgd-table { width: 100%; border-collapse: collapse; font-size: 12.5px; }
.dgd-table th { text-align: left; font-weight: 600; font-size: 11.5px; color: var(--dsw-alias-label-tertiary, #656d76); padding: 8px 10px;
  border-bottom: 1px solid var(--dsw-alias-border-l2, #e3e6ea); white-space: nowrap; }
.dgd-table td { padding: 7px 10px; border-bottom: 1px solid var(--dsw-alias-border-l1, #eef0f2); vertical-align: top; }
.dgd-table tr:last-child td { border-bottom: none; }
.dgd-table .dgd-num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.dgd-wait-window { display: block; font-size: 11px; }
.dgd-proc-name { font-weight: 600; }
.dgd-proc-cmd { display: block; max-width: 360px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-size: 11.5px; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-dev { display: inline-block; font-family: var(--dsh-font-mono, ui-monospace, monospace); font-size: 11.5px; padding: 0 6px; border-radius: 6px; }
.dgd-dev-cuda { background: var(--dsw-alias-state-success-tertiary, #dcfce7); color: var(--dsw-alias-state-success-primary, #15803d); }
.dgd-dev-cpu { background: var(--dsw-alias-state-warn-tertiary, #ffedd5); color: var(--dsw-alias-state-warn-label, #9a3412); }
.dgd-dev-mixed { background: var(--dsw-alias-state-warn-tertiary, #fef3c7); color: var(--dsw-alias-state-warn-label, #92400e); }
.dgd-dev-other, .dgd-dev-none { background: var(--dsw-alias-button-ghost-active-fill, rgba(0,0,0,.06)); color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-probe-error { color: var(--dsw-alias-state-error-primary, #dc2626); font-size: 11.5px; }
.dgd-block-head { display: flex; align-items: center; gap: 12px; margin-bottom: 8px; }
.dgd-block-head .dgd-section-title { margin: 0; }
.dgd-window { margin-left: auto; display: inline-flex; border: 1px solid var(--dsw-alias-border-l2, #e3e6ea); border-radius: 8px; overflow: hidden; }
.dgd-window button { border: none; background: transparent; padding: 3px 10px; font: inherit; font-size: 12px; cursor: pointer; color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-window button[aria-pressed="true"] { background: var(--dsw-alias-button-primary-fill, #2563eb); color: var(--dsw-alias-label-primary-foreground, #fff); }
.dgd-charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 12px; }
.dgd-chart { margin: 0; padding: 10px 12px 6px; }
.dgd-chart figcaption { display: flex; align-items: center; gap: 10px; flex-wrap: wrap; font-size: 12.5px; margin-bottom: 4px; }
.dgd-chart-title { font-weight: 600; }
.dgd-chart-flag { font-size: 11px; font-weight: 600; padding: 1px 8px; border-radius: 999px;
  background: var(--dsw-alias-state-warn-tertiary, #fef3c7); color: var(--dsw-alias-state-warn-label, #92400e); }
.dgd-legend { margin-left: auto; display: inline-flex; gap: 10px; flex-wrap: wrap; font-size: 11.5px; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-legend i { display: inline-block; width: 12px; height: 3px; border-radius: 2px; vertical-align: middle; margin-right: 4px; }
.dgd-chart-body { position: relative; height: 190px; }
.dgd-chart-body svg { display: block; width: 100%; height: 100%; overflow: visible; }
.dgd-chart-body .chart-empty { position: absolute; inset: 0; display: grid; place-items: center; font-size: 12.5px; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-chart-body svg .grid line { stroke: var(--dsw-alias-border-l1, #eceef1); stroke-width: 1; }
.dgd-chart-body svg .axis text { fill: var(--dsw-alias-label-tertiary, #656d76); font-size: 10.5px; font-family: inherit; }
.dgd-chart-body svg .series { fill: none; stroke-width: 2; stroke-linejoin: round; stroke-linecap: round; }
.dgd-chart-body svg .area { stroke: none; opacity: .1; }
.dgd-chart-body svg .limit { stroke: var(--dsw-alias-label-tertiary, #9aa1a9); stroke-dasharray: 4 4; }
.dgd-chart-body svg .limit-label { fill: var(--dsw-alias-label-tertiary, #9aa1a9); font-size: 10px; }
.dgd-chart-body svg .event line { stroke: #7c3aed; stroke-width: 1; stroke-dasharray: 3 3; opacity: .75; }
.dgd-chart-body svg .event path { fill: #7c3aed; }
.dgd-chart-body svg .event-label { fill: #7c3aed; font-size: 10px; font-weight: 600; }
.dgd-chart-body svg .event line.event-span { stroke: #7c3aed; stroke-width: 2; stroke-dasharray: none; opacity: .45; }
.dgd-chart-body svg .crosshair { stroke: var(--dsw-alias-label-tertiary, #656d76); stroke-width: 1; }
.dgd-chart-body svg .hover-dot { stroke: var(--dsw-alias-bg-layer-1, #fff); stroke-width: 2; }
.dgd-tooltip { position: fixed; z-index: 1000; pointer-events: none; min-width: 130px; padding: 7px 10px; border-radius: 8px; font-size: 12px;
  background: var(--dsw-alias-tooltip-bg, var(--dsw-alias-bg-layer-2, #fff)); color: var(--dsw-alias-label-primary-inverted, var(--dsw-alias-label-primary, #1f2328));
  box-shadow: var(--dsw-shadow-lv3, 0 6px 18px rgba(0,0,0,.14)); }
.dgd-tooltip .tt-time { opacity: .75; margin-bottom: 3px; font-variant-numeric: tabular-nums; }
.dgd-tooltip .tt-row { display: flex; gap: 10px; align-items: center; }
.dgd-tooltip .tt-row b { margin-left: auto; font-variant-numeric: tabular-nums; }
.dgd-tooltip .tt-row i { width: 9px; height: 9px; border-radius: 50%; display: inline-block; }
.dgd-tooltip .tt-event { color: #a78bfa; font-weight: 600; margin-top: 3px; white-space: pre-line; }
.dgd-events { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; }
.dgd-events li { display: inline-flex; gap: 6px; align-items: baseline; }
.dgd-ev-name { color: #7c3aed; font-weight: 600; }
.dgd-runtime { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12px; color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-runtime b { color: var(--dsw-alias-label-primary, #1f2328); font-weight: 600; }
.dgd-bad { color: var(--dsw-alias-state-error-primary, #dc2626); }

/* ---- unreachable + error cards */
.dgd-alert { border-radius: 12px; padding: 12px 14px; display: flex; gap: 12px; align-items: flex-start;
  border: 1px solid var(--dsw-alias-state-warn-primary, #d97706); background: var(--dsw-alias-state-warn-tertiary, #fffbeb); color: var(--dsw-alias-label-primary, #1f2328); }
.dgd-alert-error { border-color: var(--dsw-alias-state-error-primary, #dc2626); background: var(--dsw-alias-interactive-bg-hover-danger, #fef2f2); }
.dgd-alert-icon { flex: none; width: 24px; height: 24px; border-radius: 50%; display: grid; place-items: center; font-weight: 800; color: #fff;
  background: var(--dsw-alias-state-warn-primary, #d97706); }
.dgd-alert-error .dgd-alert-icon { background: var(--dsw-alias-state-error-primary, #dc2626); }
.dgd-alert-body { min-width: 0; display: flex; flex-direction: column; gap: 6px; }
.dgd-alert-title { margin: 0; font-size: 14px; font-weight: 700; }
.dgd-alert p { margin: 0; }
.dgd-cmds { display: flex; flex-direction: column; gap: 4px; }
.dgd-cmd { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.dgd-cmd code, .dgd-pre { font-family: var(--dsh-font-mono, ui-monospace, monospace); font-size: 12px; padding: 2px 8px; border-radius: 6px;
  background: var(--dsw-alias-markdown-code-block, rgba(0,0,0,.06)); color: var(--dsw-alias-label-primary, #1f2328); user-select: all; }
.dgd-pre { display: block; white-space: pre; padding: 8px 10px; overflow-x: auto; margin: 0; user-select: text; }
.dgd-alert-meta { font-size: 11.5px; color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-error-detail { font-family: var(--dsh-font-mono, ui-monospace, monospace); font-size: 11.5px; white-space: pre-wrap; word-break: break-word; max-height: 160px; overflow: auto; }

/* ---- settings section */
.dgd-settings { display: flex; flex-direction: column; gap: 18px; padding: 4px 0 16px; }
.dgd-field { display: flex; flex-direction: column; gap: 6px; }
.dgd-field-label { font-size: 13px; font-weight: 600; }
.dgd-field-help { font-size: 12px; color: var(--dsw-alias-label-tertiary, #656d76); margin: 0; }
.dgd-row { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
.dgd-input, .dgd-select { height: 32px; padding: 0 10px; border-radius: 8px; font: inherit; font-size: 13px; min-width: 0;
  border: 1px solid var(--dsw-alias-border-l3, var(--dsw-alias-border-l2, #d0d7de)); background: var(--dsw-alias-bg-layer-1, #fff); color: var(--dsw-alias-label-primary, #1f2328); }
.dgd-input-url { flex: 1; min-width: 220px; font-family: var(--dsh-font-mono, ui-monospace, monospace); }
.dgd-input-num { width: 90px; }
.dgd-btn { height: 32px; padding: 0 14px; border-radius: 8px; font: inherit; font-size: 13px; cursor: pointer;
  border: 1px solid var(--dsw-alias-border-l3, var(--dsw-alias-border-l2, #d0d7de)); background: transparent; color: var(--dsw-alias-label-primary, #1f2328); }
.dgd-btn:hover { background: var(--dsw-alias-interactive-bg-hover, rgba(0,0,0,.05)); }
.dgd-conn { display: flex; flex-direction: column; gap: 6px; }
.dgd-conn-state { display: inline-flex; align-items: center; gap: 8px; font-weight: 600; }
.dgd-conn-dot { width: 10px; height: 10px; border-radius: 50%; }
.dgd-kv { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; font-size: 12.5px; margin: 0; }
.dgd-kv dt { color: var(--dsw-alias-label-tertiary, #656d76); }
.dgd-kv dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
.dgd-note-ok { color: var(--dsw-alias-state-success-primary, #15803d); font-size: 12px; }
.dgd-note-warn { color: var(--dsw-alias-state-warn-label, #92400e); font-size: 12px; }

/* ---- efficiency strip (efficiency.jsx) */
.dgd-eff { display: flex; flex-direction: column; gap: 8px; margin-bottom: 12px; }
.dgd-eff-groups { display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 10px 18px; }
.dgd-eff-group { display: flex; flex-direction: column; gap: 5px; min-width: 0; }
.dgd-eff-group h4 { margin: 0; font-size: 12px; font-weight: 600; color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-eff-step { grid-column: 1 / -1; }
.dgd-eff-stack { display: flex; height: 12px; border-radius: 6px; overflow: hidden; background: var(--dsw-alias-bg-layer-2, #eceef1); }
.dgd-eff-stack span { display: block; height: 100%; min-width: 2px; }
.dgd-eff-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; font-size: 12px; }
.dgd-eff-legend i { display: inline-block; width: 9px; height: 9px; border-radius: 3px; margin-right: 5px; }
.dgd-eff-items { display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12px; }
.dgd-eff-item b { font-weight: 600; font-variant-numeric: tabular-nums; }
.dgd-eff-note { color: var(--dsw-alias-label-tertiary, #9aa1a9); font-size: 11px; }
.dgd-eff-bad b, .dgd-eff-bad .dgd-eff-note { color: var(--dsw-alias-state-error-primary, #dc2626); }
.dgd-eff-reasons { display: flex; flex-wrap: wrap; gap: 4px; }
.dgd-eff-reason-neutral { background: var(--dsw-alias-bg-layer-2, #f3f4f6); color: var(--dsw-alias-label-secondary, #4b5563); }
.dgd-eff-reason-problem { background: var(--dsw-alias-state-error-tertiary, #fee2e2); color: var(--dsw-alias-state-error-primary, #dc2626); font-weight: 600; }
`

export function ensureStyle() {
  try {
    if (typeof document === 'undefined' || document.getElementById(STYLE_ID)) return
    const el = document.createElement('style')
    el.id = STYLE_ID
    el.textContent = CSS
    document.head.appendChild(el)
  } catch {
    /* styling is best effort */
  }
}
