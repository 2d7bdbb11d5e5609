// The GPU view (conversation tab): hero, GPU cards, process table, cluster (with --prometheus), history charts, runtime footer,
// then the session's recorded runs (runs.jsx).
import { NA, summarize } from '../../../sidecar/static/shared/format.js'
import { heroFacts, runtimeFacts } from '../../../sidecar/static/shared/view_model.js'
import { Badge, Updated, Warnings, targetText, useLang, useStatus } from './shared.jsx'
import { ConnectionNotice } from './errors.jsx'
import { ProcessTable } from './processes.jsx'
import { GpuCards } from './gpus.jsx'
import { HistoryCharts } from './charts.jsx'
import { SessionJobs } from './jobs.jsx'
import { EfficiencyStrip } from './efficiency.jsx'
import { ClusterSection } from './cluster.jsx'
import { SessionRuns } from './runs.jsx'
import { getStore } from './store.js'

function Hero({ doc, lang, lastOk }) {
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
        {heroFacts(doc, lang).map((f) => (
          <div key={f.key} data-key={f.key}>
            <dt>{f.label}</dt>
            <dd title={f.title || f.text}>{f.chip && f.chip.device !== null ? <span className={`dgd-dev dgd-dev-${f.chip.kind}`}>{f.text}</span> : f.text}</dd>
          </div>
        ))}
      </dl>
      <Warnings doc={doc} lang={lang} />
    </section>
  )
}

function RuntimeFooter({ doc, lang }) {
  const facts = runtimeFacts(doc, lang)
  return (
    <footer className="dgd-runtime" data-testid="dsh-gpu-runtime">
      {facts.items.map((it) => (
        <span key={it.key} data-key={it.key}>
          {it.label} <b className={it.bad ? 'dgd-bad' : undefined}>{it.value}</b>
        </span>
      ))}
      {facts.error ? <span className="dgd-bad">{facts.error}</span> : null}
      {facts.interval ? <span>{facts.interval}</span> : null}
    </footer>
  )
}

/** The GPU tab of a session: its jobs (jobs.jsx), then the chosen job. */
export function GpuView(props) {
  return (
    <SessionJobs sessionId={props && props.sessionId}>
      {(header, showJob) => <GpuViewBody header={header} showJob={showJob} sessionId={props && props.sessionId} />}
    </SessionJobs>
  )
}

function GpuViewBody({ header, showJob, sessionId }) {
  const st = useStatus()
  const lang = useLang()
  const doc = st.doc
  // data-selected-job (the job chosen in the session's list) and data-job-id (the job the shown
  // document is of) agree once the view shows the chosen job: what a test waits for.
  return (
    <div className="dgd-root dgd-view" data-testid="dsh-gpu-view" data-state={st.state}
      data-selected-job={getStore().job() || ''} data-job-id={doc && showJob ? doc.job_id || '' : ''}>
      {header}
      <ConnectionNotice st={st} lang={lang} />
      {doc && showJob ? (
        <>
          <Hero doc={doc} lang={lang} lastOk={st.lastOk} />
          <EfficiencyStrip doc={doc} lang={lang} />
          <GpuCards doc={doc} lang={lang} />
          <ProcessTable doc={doc} lang={lang} />
          <ClusterSection doc={doc} lang={lang} />
          <HistoryCharts doc={doc} lang={lang} />
          <RuntimeFooter doc={doc} lang={lang} />
        </>
      ) : null}
      <SessionRuns sessionId={sessionId} lang={lang} />
    </div>
  )
}
