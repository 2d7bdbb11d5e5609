// The GPU view (conversation tab): hero, GPU cards, process table, history charts, runtime footer.
import {
  NA,
  cudaText,
  deviceText,
  fmtMiB,
  modelGpu,
  roleText,
  summarize,
  t,
  unusableGpus,
} from '../../../sidecar/static/format.js'
import { Badge, GpuMeters, Updated, Warnings, isNum, targetText, useHistory, useLang, useStatus } from './shared.jsx'
import { ConnectionNotice } from './errors.jsx'
import { ProcessTable } from './processes.jsx'
import { HistoryCharts } from './charts.jsx'
import { SessionJobs } from './jobs.jsx'
import { EfficiencyStrip, MigList } from './efficiency.jsx'
import { utilText } from '../../../sidecar/static/efficiency.js'

function Hero({ doc, lang, lastOk }) {
  const rt = (doc && doc.runtime) || {}
  const cuda = cudaText(rt, lang)
  return (
    <section className="dgd-card dgd-hero" data-testid="dsh-gpu-hero">
      <div className="dgd-hero-main">
        <Badge doc={doc} lang={lang} big />
        <div className="dgd-hero-text">
          <p className="dgd-message" data-testid="dsh-gpu-message">
            {summarize(doc, lang).message || NA}
          </p>
          {targetText(doc, lang) ? (
            <span className="dgd-muted" data-testid="dsh-gpu-target">
              {targetText(doc, lang)}
            </span>
          ) : null}
          <Updated lastOk={lastOk} lang={lang} />
        </div>
      </div>
      <dl className="dgd-facts" data-testid="dsh-gpu-facts">
        <div>
          <dt>{t(lang, 'summary.util')}</dt>
          <dd>{utilText(modelGpu(doc), lang)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.mem')}</dt>
          <dd>{fmtMiB(modelGpu(doc)?.mem_used_mib)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.modelDevice')}</dt>
          <dd>{deviceText(doc.model_device)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.inputDevice')}</dt>
          <dd>{deviceText(doc.input_device)}</dd>
        </div>
        <div>
          <dt>{t(lang, 'summary.cuda')}</dt>
          <dd title={cuda}>{cuda}</dd>
        </div>
      </dl>
      <Warnings doc={doc} lang={lang} />
    </section>
  )
}

function procsOnGpu(doc, index) {
  const out = []
  for (const p of (doc && doc.processes) || []) {
    if (!p || !Array.isArray(p.gpu)) continue
    for (const g of p.gpu) if (g && g.index === index) out.push({ proc: p, gpu: g })
  }
  return out
}

function GpuCard({ doc, g, i, modelDev, lang }) {
  const procs = procsOnGpu(doc, g.index)
  const fw = isNum(g.framework_index) ? `cuda:${g.framework_index}` : null
  return (
    <article className="dgd-card" data-testid="dsh-gpu-card" data-index={g.index ?? ''}>
      <div className="dgd-gpu-head">
        <span className="dgd-gpu-index">GPU {isNum(g.index) ? g.index : i}</span>
        <span className="dgd-gpu-name" title={g.uuid || ''}>
          {g.name || NA}
        </span>
        {fw && modelDev === fw ? <span className="dgd-tag dgd-tag-ok">{t(lang, 'gpu.modelHere')}</span> : null}
        {fw ? (
          <span className="dgd-tag" title={t(lang, 'gpu.framework', { dev: fw })}>
            {fw}
          </span>
        ) : (
          <span className="dgd-tag dgd-tag-warn" title={t(lang, 'gpu.frameworkHidden')}>
            {t(lang, 'gpu.hiddenTag')}
          </span>
        )}
      </div>
      <GpuMeters gpu={g} lang={lang} />
      <div className="dgd-gpu-foot">
        {procs.length ? (
          <>
            {t(lang, 'gpu.procs')}
            <ul className="dgd-gpu-procs">
              {procs.map(({ proc, gpu }) => (
                <li key={`${proc.pid}`}>
                  <span className="dgd-mono">{proc.pid}</span>
                  <span>{roleText(proc, lang)}</span>
                  <b>{fmtMiB(gpu.mem_used_mib)}</b>
                </li>
              ))}
            </ul>
          </>
        ) : (
          <span className="dgd-muted">{t(lang, 'gpu.noProcs')}</span>
        )}
      </div>
      <MigList doc={doc} gpu={g} lang={lang} />
    </article>
  )
}

function GpuCards({ doc, lang }) {
  const gpus = Array.isArray(doc.gpus) ? doc.gpus.filter(Boolean) : []
  const unusable = unusableGpus(doc)
  const modelDev = typeof doc.model_device === 'string' ? doc.model_device : ''
  return (
    <section data-testid="dsh-gpu-gpus">
      <h3 className="dgd-section-title">{t(lang, 'gpus.title')}</h3>
      {!gpus.length && !unusable.length ? (
        <div className="dgd-card dgd-muted">
          {t(lang, 'gpus.none')}
          {doc.nvml && doc.nvml.ok === false && doc.nvml.error ? (
            <div className="dgd-bad">{t(lang, 'runtime.nvmlError', { error: doc.nvml.error })}</div>
          ) : null}
        </div>
      ) : null}
      <div className="dgd-gpu-grid">
        {gpus.map((g, i) => (
          <GpuCard key={`gpu-${g.index ?? i}`} doc={doc} g={g} i={i} modelDev={modelDev} lang={lang} />
        ))}
        {unusable.map((s, i) => (
          <article className="dgd-card" key={`sys-${s.pci || i}`} data-testid="dsh-gpu-igpu">
            <div className="dgd-gpu-head">
              <span className="dgd-gpu-name">{s.name || s.vendor || NA}</span>
              <span className="dgd-tag dgd-tag-warn">{t(lang, 'igpu.badge')}</span>
            </div>
            <div className="dgd-muted">{t(lang, 'igpu.note')}</div>
            <div className="dgd-gpu-foot">
              {s.pci ? t(lang, 'igpu.pci', { pci: s.pci }) : null}
              {s.driver ? ` · ${t(lang, 'igpu.driver', { driver: s.driver })}` : null}
            </div>
          </article>
        ))}
      </div>
    </section>
  )
}

function RuntimeFooter({ doc, lang, intervalS }) {
  const rt = (doc && doc.runtime) || {}
  const nv = (doc && doc.nvml) || {}
  const items = []
  if (rt.torch) items.push([t(lang, 'runtime.torch'), rt.torch])
  if (rt.torch) items.push([t(lang, 'runtime.cudaBuild'), rt.cuda_build || t(lang, 'runtime.cudaBuildNone')])
  if (rt.cudnn) items.push([t(lang, 'runtime.cudnn'), String(rt.cudnn)])
  if (rt.cuda_visible_devices !== null && rt.cuda_visible_devices !== undefined)
    items.push([t(lang, 'runtime.visible'), String(rt.cuda_visible_devices)])
  if (nv.driver) items.push([t(lang, 'runtime.driver'), nv.driver])
  if (nv.cuda_driver) items.push([t(lang, 'runtime.cudaDriver'), nv.cuda_driver])
  return (
    <footer className="dgd-runtime" data-testid="dsh-gpu-runtime">
      {items.map(([k, v]) => (
        <span key={k}>
          {k} <b>{v}</b>
        </span>
      ))}
      {nv.ok === false && nv.error ? <span className="dgd-bad">{t(lang, 'runtime.nvmlError', { error: nv.error })}</span> : null}
      {isNum(intervalS) ? <span>{t(lang, 'runtime.interval', { s: intervalS })}</span> : null}
    </footer>
  )
}

/** The GPU tab of a session: its jobs (jobs.jsx), then the chosen job. */
export function GpuView(props) {
  return (
    <SessionJobs sessionId={props && props.sessionId}>
      {(header, showJob) => <GpuViewBody header={header} showJob={showJob} />}
    </SessionJobs>
  )
}

function GpuViewBody({ header, showJob }) {
  const st = useStatus()
  const lang = useLang()
  const h = useHistory()
  const doc = st.doc
  return (
    <div className="dgd-root dgd-view" data-testid="dsh-gpu-view" data-state={st.state}>
      {header}
      <ConnectionNotice st={st} lang={lang} />
      {doc && showJob ? (
        <>
          <Hero doc={doc} lang={lang} lastOk={st.lastOk} />
          <EfficiencyStrip doc={doc} lang={lang} />
          <GpuCards doc={doc} lang={lang} />
          <ProcessTable doc={doc} lang={lang} />
          <HistoryCharts doc={doc} lang={lang} />
          <RuntimeFooter doc={doc} lang={lang} intervalS={h.intervalS} />
        </>
      ) : null}
    </div>
  )
}
