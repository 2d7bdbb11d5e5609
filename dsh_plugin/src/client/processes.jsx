// The process table of the GPU view.
import {
  NA,
  cmdText,
  deviceKind,
  deviceText,
  fmtCount,
  fmtMiB,
  fmtPct,
  fmtRate,
  roleText,
  t,
} from '../../../sidecar/static/format.js'
import { dataWait, smText } from '../../../sidecar/static/efficiency.js'
import { isNum } from './shared.jsx'

function DeviceChip({ dev }) {
  return <span className={`dgd-dev dgd-dev-${deviceKind(dev)}`}>{deviceText(dev)}</span>
}

function ProcessRow({ p, lang }) {
  const models = Array.isArray(p.models) ? p.models.filter(Boolean) : []
  const m = models[0] || null
  const wait = dataWait(p, lang)
  const gpuRows = Array.isArray(p.gpu) ? p.gpu.filter(Boolean) : []
  const mem = gpuRows.reduce((a, g) => (isNum(g.mem_used_mib) ? (a ?? 0) + g.mem_used_mib : a), null)
  return (
    <tr data-testid="dsh-gpu-process" data-pid={p.pid ?? ''} data-exited={p.exited ? 'true' : undefined}>
      <td>
        <span className="dgd-proc-name">{p.name || NA}</span> <span className="dgd-mono dgd-muted">{p.pid ?? NA}</span>
        {p.exited ? (
          <span className="dgd-muted" data-testid="dsh-gpu-exited" title={t(lang, 'proc.exitedTitle')}>
            {' '}
            {t(lang, 'proc.exited')}
          </span>
        ) : null}
        {cmdText(p.cmdline) ? (
          <span className="dgd-proc-cmd" title={cmdText(p.cmdline)}>
            {cmdText(p.cmdline)}
          </span>
        ) : null}
        {p.probe_error ? (
          <div className="dgd-probe-error">{t(lang, 'probe.error', { error: p.probe_error })}</div>
        ) : null}
      </td>
      <td title={!p.has_probe ? t(lang, 'probe.noneTitle') : undefined}>{roleText(p, lang)}</td>
      <td>
        {models.length
          ? models.map((mm, j) => (
              <div key={j}>
                {mm.name || NA}
                {isNum(mm.param_count) ? (
                  <span className="dgd-muted"> · {t(lang, 'model.params', { n: fmtCount(mm.param_count) })}</span>
                ) : null}
              </div>
            ))
          : NA}
      </td>
      <td>
        {models.length ? models.map((mm, j) => <div key={j}><DeviceChip dev={mm.device} /></div>) : <DeviceChip dev={null} />}
      </td>
      <td>
        {models.length ? (
          models.map((mm, j) => <div key={j}><DeviceChip dev={mm.input_device} /></div>)
        ) : (
          <DeviceChip dev={null} />
        )}
      </td>
      <td className="dgd-num">{fmtMiB(mem)}</td>
      <td className="dgd-num" data-testid="dsh-gpu-sm">{smText(p, lang)}</td>
      <td className="dgd-num">{fmtPct(p.cpu_pct)}</td>
      <td className="dgd-num" data-testid="dsh-gpu-data-wait" data-source={wait ? wait.source : undefined}>
        <span data-testid="dsh-gpu-data-wait-value">{wait ? wait.value : NA}</span>
        {wait && wait.window ? (
          <span className="dgd-muted dgd-wait-window" data-testid="dsh-gpu-data-wait-window">
            {wait.window}
          </span>
        ) : null}
      </td>
      <td className="dgd-num">{m ? fmtRate(m.forward_rate_hz) : NA}</td>
    </tr>
  )
}

export function ProcessTable({ doc, lang }) {
  const procs = Array.isArray(doc.processes) ? doc.processes.filter(Boolean) : []
  return (
    <section>
      <h3 className="dgd-section-title">{t(lang, 'procs.title')}</h3>
      <div className="dgd-card dgd-table-wrap">
        {procs.length ? (
          <table className="dgd-table" data-testid="dsh-gpu-processes">
            <thead>
              <tr>
                <th>{t(lang, 'col.process')}</th>
                <th>{t(lang, 'col.role')}</th>
                <th>{t(lang, 'col.model')}</th>
                <th>{t(lang, 'col.modelDevice')}</th>
                <th>{t(lang, 'col.inputDevice')}</th>
                <th className="dgd-num">{t(lang, 'col.gpuMem')}</th>
                <th className="dgd-num">{t(lang, 'col.sm')}</th>
                <th className="dgd-num">{t(lang, 'col.cpu')}</th>
                <th className="dgd-num">{t(lang, 'col.dataWait')}</th>
                <th className="dgd-num">{t(lang, 'col.rate')}</th>
              </tr>
            </thead>
            <tbody>
              {procs.map((p, i) => (
                <ProcessRow key={`${p.pid ?? i}`} p={p} lang={lang} />
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
