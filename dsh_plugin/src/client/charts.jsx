// History charts of the GPU view: the standalone page's TimeChart (sidecar/static/shared/charts.js) in a React ref,
// drawing the data of the shared sidecar/static/shared/history_data.js: GPU memory, utilisation (with GPM SM
// activity and occupancy), power and temperature; the job's CPU, RSS and rates where there is no NVIDIA GPU.
import { useEffect, useMemo, useRef, useState } from 'react'
import { NA, fmtClock, fmtMiB, t } from '../../../sidecar/static/shared/format.js'
import { TimeChart } from '../../../sidecar/static/shared/charts.js'
import {
  CHART_FORMATS,
  GPU_CHARTS,
  JOB_CHARTS,
  cpuMode,
  gpuChartData,
  jobChartData,
} from '../../../sidecar/static/shared/history_data.js'
import { useHistory } from './shared.jsx'

let tooltipEl = null
let tooltipUsers = 0
function acquireTooltip() {
  tooltipUsers += 1
  if (!tooltipEl) {
    tooltipEl = document.createElement('div')
    tooltipEl.className = 'dgd-root dgd-tooltip'
    tooltipEl.hidden = true
    tooltipEl.setAttribute('data-testid', 'dsh-gpu-tooltip')
    document.body.appendChild(tooltipEl)
  }
  return tooltipEl
}
function releaseTooltip() {
  tooltipUsers -= 1
  if (tooltipUsers <= 0 && tooltipEl) {
    tooltipEl.remove()
    tooltipEl = null
    tooltipUsers = 0
  }
}

/** The standalone page's TimeChart (sidecar/static/shared/charts.js), mounted into a React ref. */
function TimeChartBox({ data, emptyText, formatValue, title, eventsLabel, group, testid }) {
  const bodyRef = useRef(null)
  const chartRef = useRef(null)
  const optsRef = useRef({ formatValue, title, eventsLabel })
  optsRef.current.formatValue = formatValue
  optsRef.current.title = title
  optsRef.current.eventsLabel = eventsLabel
  useEffect(() => {
    const tip = acquireTooltip()
    const opts = {
      formatValue: (v, axis) => optsRef.current.formatValue(v, axis),
      title: () => (optsRef.current.title ? optsRef.current.title() : ''),
      eventsLabel: (n) => optsRef.current.eventsLabel(n),
      tooltip: tip,
      group,
    }
    chartRef.current = new TimeChart(bodyRef.current, opts)
    return () => {
      try {
        const i = group.indexOf(chartRef.current)
        if (i >= 0) group.splice(i, 1)
        bodyRef.current && bodyRef.current.replaceChildren()
      } finally {
        chartRef.current = null
        releaseTooltip()
      }
    }
  }, [group])
  useEffect(() => {
    if (!chartRef.current) return
    chartRef.current.setEmptyText(emptyText)
    chartRef.current.setData(data)
  }, [data, emptyText])
  return <div className="dgd-chart-body" ref={bodyRef} data-testid={testid} />
}

const WINDOWS = ['60', '300', '900', 'all']

function Legend({ series }) {
  return (
    <span className="dgd-legend">
      {series.map((s) => (
        <span key={s.key} data-series={s.key}>
          <i style={s.dash ? { background: 'none', height: 0, borderTop: `2px dashed ${s.color}` } : { background: s.color }} />
          {s.label}
        </span>
      ))}
    </span>
  )
}

function ChartFigure({ name, data, lang, group, flag }) {
  return (
    <figure className="dgd-card dgd-chart" data-testid={`dsh-gpu-chart-${name}`}>
      <figcaption>
        <span className="dgd-chart-title">{t(lang, `chart.${name}`)}</span>
        {flag || null}
        <Legend series={data.series} />
      </figcaption>
      <TimeChartBox
        data={data}
        emptyText={t(lang, 'chart.noData')}
        formatValue={CHART_FORMATS[name]}
        title={() => t(lang, `chart.${name}`)}
        eventsLabel={(n) => t(lang, 'chart.events', { n })}
        group={group}
        testid={`dsh-gpu-chart-${name}-body`}
      />
    </figure>
  )
}

function EventList({ events, lang }) {
  return (
    <div className="dgd-card" style={{ marginTop: 12 }} data-testid="dsh-gpu-events">
      <h3 className="dgd-section-title">{t(lang, 'events.title')}</h3>
      {events.length ? (
        <ol className="dgd-events">
          {events.slice(-30).map((e, i) => (
            <li key={i}>
              <span className="dgd-mono dgd-muted">{fmtClock(e.time_unix_s)}</span>
              <span className="dgd-ev-name">{e.name || NA}</span>
              {e.pid ? <span className="dgd-muted">pid {e.pid}</span> : null}
            </li>
          ))}
        </ol>
      ) : (
        <span className="dgd-muted">{t(lang, 'events.none')}</span>
      )}
    </div>
  )
}

export function HistoryCharts({ doc, lang }) {
  const h = useHistory()
  const [win, setWin] = useState('300')
  const group = useMemo(() => [], [])
  const samples = h.samples
  const last = samples.length ? samples[samples.length - 1].time_unix_s : Date.now() / 1000
  const first = samples.length ? samples[0].time_unix_s : last - 60
  const span = win === 'all' ? Math.max(60, last - first) : Number(win)
  const t1 = last
  const t0 = win === 'all' ? Math.min(first, last - 60) : last - span
  const cpu = cpuMode(doc)
  const data = useMemo(() => {
    const tr = (key, vars) => t(lang, key, vars)
    return cpu ? jobChartData(samples, t0, tr) : gpuChartData(doc, samples, t0, tr)
  }, [samples, doc, lang, t0, cpu])
  const events = h.events // the status document's merged in too (shared/store.js withStatus)
  const gapS = Math.max(5, (h.intervalS || 1) * 4)
  // power and temperature only where the driver reports them
  const names = cpu ? JOB_CHARTS : GPU_CHARTS.filter((n) => n === 'mem' || n === 'util' || data[n].series.some((s) => s.points.length))
  const growth = doc && doc.memory_growth // the verdict's decision, shown as is
  const growthFlag = growth ? <span className="dgd-chart-flag">{t(lang, 'chart.growing', { rate: fmtMiB(growth.rate_mib_per_min) })}</span> : null

  return (
    <section data-testid="dsh-gpu-history" data-mode={cpu ? 'cpu' : 'gpu'}>
      <div className="dgd-block-head">
        <h3 className="dgd-section-title">{t(lang, 'charts.title')}</h3>
        <span className="dgd-window" role="group" aria-label={t(lang, 'chart.window')}>
          {WINDOWS.map((w) => (
            <button key={w} type="button" aria-pressed={w === win ? 'true' : 'false'} onClick={() => setWin(w)} data-testid={`dsh-gpu-window-${w}`}>
              {t(lang, `window.${w}`)}
            </button>
          ))}
        </span>
      </div>
      {cpu ? <div className="dgd-muted">{t(lang, 'chart.cpuNote')}</div> : null}
      <div className="dgd-charts">
        {names.map((name) => (
          <ChartFigure
            key={name}
            name={name}
            data={{ ...data[name], t0, t1, events, gapS }}
            lang={lang}
            group={group}
            flag={name === 'mem' ? growthFlag : null}
          />
        ))}
      </div>
      <EventList events={events} lang={lang} />
    </section>
  )
}
