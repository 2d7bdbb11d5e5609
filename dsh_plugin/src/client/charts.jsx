// History charts of the GPU view: the standalone page's TimeChart (sidecar/static/charts.js) in a React ref.
import { useEffect, useMemo, useRef, useState } from 'react'
import {
  NA,
  SERIES_COLORS,
  fmtClock,
  fmtMiB,
  fmtPct,
  t,
} from '../../../sidecar/static/format.js'
import { TimeChart, niceTicks, pointsByGpu } from '../../../sidecar/static/charts.js'
import { isNum, useHistory } from './shared.jsx'

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

/** The standalone page's TimeChart (sidecar/static/charts.js), mounted into a React ref. */
function TimeChartBox({ data, emptyText, formatValue, title, group, testid }) {
  const bodyRef = useRef(null)
  const chartRef = useRef(null)
  const optsRef = useRef({ formatValue, title })
  optsRef.current.formatValue = formatValue
  optsRef.current.title = title
  useEffect(() => {
    const tip = acquireTooltip()
    const opts = {
      formatValue: (v, axis) => optsRef.current.formatValue(v, axis),
      title: () => (optsRef.current.title ? optsRef.current.title() : ''),
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

function buildSeries(samples, doc, lang, t0) {
  const { indices, mem: memByGpu, util: utilByGpu } = pointsByGpu(samples, t0)
  const mk = (map) =>
    indices.map((idx, i) => ({
      key: `gpu${idx}`,
      label: t(lang, 'chart.gpuN', { n: idx }),
      color: SERIES_COLORS[i % SERIES_COLORS.length],
      points: map.get(idx),
    }))
  const totals = new Map()
  for (const g of (doc && doc.gpus) || []) if (g && isNum(g.index) && isNum(g.mem_total_mib)) totals.set(g.index, g.mem_total_mib)
  return { mem: mk(memByGpu), util: mk(utilByGpu), totals }
}

function Legend({ series }) {
  return (
    <span className="dgd-legend">
      {series.map((s) => (
        <span key={s.key}>
          <i style={{ background: s.color }} />
          {s.label}
        </span>
      ))}
    </span>
  )
}

/** The memory chart's data: a y range that fits the series (or the card's total) and the total as a limit line. */
function memChartData(mem, totals, lang, common) {
  let memMax = 0
  for (const s of mem) for (const p of s.points) memMax = Math.max(memMax, p[1])
  const totalList = [...totals.values()]
  const maxTotal = totalList.length ? Math.max(...totalList) : 0
  if (maxTotal && memMax > maxTotal * 0.6) memMax = maxTotal
  const memTicks = niceTicks(Math.max(memMax * 1.1, 64), 4, memMax > 4096 ? 1024 : 1)
  return {
    ...common,
    series: mem,
    yMax: memTicks.max,
    yTicks: memTicks.ticks,
    limits: totalList.length === 1 ? [{ value: totalList[0], label: t(lang, 'gpu.memTotal', { total: fmtMiB(totalList[0]) }) }] : [],
  }
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
  const { mem, util, totals } = useMemo(() => buildSeries(samples, doc, lang, t0), [samples, doc, lang, t0])
  const events = (h.events && h.events.length ? h.events : (doc && doc.events) || []).filter(Boolean)
  const gapS = Math.max(5, (h.intervalS || 1) * 4)

  const memData = memChartData(mem, totals, lang, { t0, t1, events, gapS })
  const utilData = { series: util, t0, t1, yMax: 100, yTicks: [0, 25, 50, 75, 100], events, gapS }
  const growth = doc && doc.memory_growth // the verdict's decision, shown as is

  return (
    <section data-testid="dsh-gpu-history">
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
      <div className="dgd-charts">
        <figure className="dgd-card dgd-chart" data-testid="dsh-gpu-chart-mem">
          <figcaption>
            <span className="dgd-chart-title">{t(lang, 'chart.mem')}</span>
            {growth ? <span className="dgd-chart-flag">{t(lang, 'chart.growing', { rate: fmtMiB(growth.rate_mib_per_min) })}</span> : null}
            <Legend series={mem} />
          </figcaption>
          <TimeChartBox
            data={memData}
            emptyText={t(lang, 'chart.noData')}
            formatValue={(v) => fmtMiB(v)}
            title={() => t(lang, 'chart.mem')}
            group={group}
            testid="dsh-gpu-chart-mem-body"
          />
        </figure>
        <figure className="dgd-card dgd-chart" data-testid="dsh-gpu-chart-util">
          <figcaption>
            <span className="dgd-chart-title">{t(lang, 'chart.util')}</span>
            <Legend series={util} />
          </figcaption>
          <TimeChartBox
            data={utilData}
            emptyText={t(lang, 'chart.noData')}
            formatValue={(v, axis) => (axis ? `${Math.round(v)} %` : fmtPct(v))}
            title={() => t(lang, 'chart.util')}
            group={group}
            testid="dsh-gpu-chart-util-body"
          />
        </figure>
      </div>
      <EventList events={events} lang={lang} />
    </section>
  )
}
