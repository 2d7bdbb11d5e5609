// The process table of the GPU view: the cells of the shared view model (sidecar/static/shared/
// view_model.js, the standalone page lays out the same ones), laid out as React elements.
// Plain function components without hooks (tests render them without React).
import { NA, t } from '../../../sidecar/static/shared/format.js'
import { PROCESS_COLUMNS, processRows } from '../../../sidecar/static/shared/view_model.js'

function DeviceChip({ c }) {
  if (c.device === null) return NA
  return (
    <span className={`dgd-dev dgd-dev-${c.kind}`} data-device={c.device}>
      {c.text}
    </span>
  )
}

function ProcessCell({ row }) {
  const c = row.cells.process
  return (
    <td>
      <div style={{ paddingLeft: row.depth * 14 }}>
        {row.branch ? <span className="dgd-muted dgd-tree">{row.branch} </span> : null}
        <span className="dgd-proc-name">{c.name}</span> <span className="dgd-mono dgd-muted">{c.pid}</span>
        {c.exited ? (
          <span className="dgd-muted" data-testid="dsh-gpu-exited" title={c.exited.title}>
            {' '}
            {c.exited.text}
          </span>
        ) : null}
        {c.cmd ? (
          <span className="dgd-proc-cmd" title={c.cmd}>
            {c.cmd}
          </span>
        ) : null}
        {c.probeError ? <div className="dgd-probe-error">{c.probeError}</div> : null}
      </div>
    </td>
  )
}

function CellContent({ k, c }) {
  if (k === 'role') return c.probed ? c.text : <span className="dgd-muted" title={c.title}>{c.text}</span>
  if (k === 'models') {
    if (c.na) return NA
    return c.items.map((m, j) => (
      <div key={j}>
        <DeviceChip c={m.device} /> <span className="dgd-muted">{m.label}</span>
      </div>
    ))
  }
  if (k === 'inputs') return c.na ? NA : c.items.map((d, j) => <div key={j}><DeviceChip c={d} /></div>)
  if (k === 'dataWait') {
    return (
      <>
        <span data-testid="dsh-gpu-data-wait-value">{c.value}</span>
        {c.window ? (
          <span className="dgd-muted dgd-wait-window" data-testid="dsh-gpu-data-wait-window">
            {c.window}
          </span>
        ) : null}
      </>
    )
  }
  return c.text
}

// The cells with a test id of their own (the others are found by their column).
const CELL_TESTIDS = { sm: 'dsh-gpu-sm', dataWait: 'dsh-gpu-data-wait' }

function ProcessRow({ row, lang }) {
  return (
    <tr data-testid="dsh-gpu-process" data-pid={row.pid ?? ''} data-depth={row.depth} data-exited={row.exited ? 'true' : undefined}>
      {PROCESS_COLUMNS.map((col) => {
        if (col.key === 'process') return <ProcessCell key={col.key} row={row} />
        const c = row.cells[col.key]
        const cls = [col.num ? 'dgd-num' : '', c.na && col.key !== 'role' ? 'dgd-muted' : '', c.flag === 'high' ? 'dgd-bad' : '']
        return (
          <td
            key={col.key}
            className={cls.filter(Boolean).join(' ') || undefined}
            data-testid={CELL_TESTIDS[col.key]}
            data-label={t(lang, col.label)}
            title={c.title || undefined}
            data-source={c.source || undefined}
            data-flag={c.flag || undefined}
          >
            <CellContent k={col.key} c={c} />
          </td>
        )
      })}
    </tr>
  )
}

export function ProcessTable({ doc, lang }) {
  const rows = processRows(doc, lang)
  return (
    <section>
      <h3 className="dgd-section-title">{t(lang, 'procs.title')}</h3>
      <div className="dgd-card dgd-table-wrap">
        {rows.length ? (
          <table className="dgd-table" data-testid="dsh-gpu-processes">
            <thead>
              <tr>
                {PROCESS_COLUMNS.map((col) => (
                  <th key={col.key} className={col.num ? 'dgd-num' : undefined}>
                    {t(lang, col.label)}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((row, i) => (
                <ProcessRow key={`${row.pid ?? i}`} row={row} lang={lang} />
              ))}
            </tbody>
          </table>
        ) : (
          <div className="dgd-muted" style={{ padding: 14 }}>
            {t(lang, 'procs.none')}
          </div>
        )}
      </div>
    </section>
  )
}
