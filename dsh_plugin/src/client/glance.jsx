// The glance card floating above the chip.
import { useEffect, useRef, useState } from 'react'
import { NA, summarize, t } from '../../../sidecar/static/shared/format.js'
import { gpuCard } from '../../../sidecar/static/shared/view_model.js'
import { getStore } from './store.js'
import { Badge, Updated, Warnings, targetText, useLang, useStatus, useUi } from './shared.jsx'
import { GpuMeters } from './gpus.jsx'
import { ConnectionNotice } from './errors.jsx'

// ------------------------------------------------------------------ glance card

export function GlanceCard() {
  const ui = useUi()
  if (!ui.glanceOpen) return null
  return <GlanceCardOpen />
}

/** Where the card floats: just above the chip (the sidebar may be wide, a rail, or resized); Escape closes it. */
function useGlancePlacement(store) {
  const [pos, setPos] = useState(null)
  useEffect(() => {
    const onKey = (e) => {
      if (e.key === 'Escape') store.toggleGlance(false)
    }
    const place = () => {
      try {
        const chip = document.querySelector('[data-testid="dsh-gpu-chip"]')
        if (!chip) return setPos(null)
        const r = chip.getBoundingClientRect()
        setPos({ left: Math.max(8, Math.round(r.left)), bottom: Math.max(8, Math.round(window.innerHeight - r.top + 8)) })
      } catch {
        setPos(null)
      }
    }
    place()
    window.addEventListener('keydown', onKey)
    window.addEventListener('resize', place)
    return () => {
      window.removeEventListener('keydown', onKey)
      window.removeEventListener('resize', place)
    }
  }, [store])
  return pos
}

function GlanceCardOpen() {
  const st = useStatus()
  const lang = useLang()
  const store = getStore()
  const ref = useRef(null)
  const pos = useGlancePlacement(store)
  const doc = st.doc
  const gpus = doc && Array.isArray(doc.gpus) ? doc.gpus.filter(Boolean) : []
  return (
    <section
      ref={ref}
      className="dgd-root dgd-glance"
      style={pos ? { left: pos.left, bottom: pos.bottom, maxHeight: `calc(100vh - ${pos.bottom + 16}px)` } : undefined}
      data-testid="dsh-gpu-glance"
      data-state={st.state}
      role="dialog"
      aria-label={t(lang, 'glance.title')}
    >
      <div className="dgd-glance-head">
        <span className="dgd-glance-title">{t(lang, 'glance.title')}</span>
        <button type="button" className="dgd-close" aria-label={t(lang, 'glance.close')} onClick={() => store.toggleGlance(false)}>
          ×
        </button>
      </div>
      <ConnectionNotice st={st} lang={lang} />
      {doc ? (
        <>
          <div>
            <Badge doc={doc} lang={lang} />
          </div>
          <p className="dgd-message" data-testid="dsh-gpu-message">
            {summarize(doc, lang).message || NA}
          </p>
          {targetText(doc, lang) ? (
            <span className="dgd-muted" style={{ fontSize: 12 }}>
              {targetText(doc, lang)}
            </span>
          ) : null}
          <Warnings doc={doc} lang={lang} limit={3} />
          {gpus.length ? (
            gpus.map((g, i) => (
              <div className="dgd-glance-gpu" key={`${g.index ?? i}`} data-testid="dsh-gpu-glance-gpu">
                <span className="dgd-glance-gpu-name">
                  {gpuCard(doc, g, lang).title} · {gpuCard(doc, g, lang).name}
                </span>
                <GpuMeters gpu={g} lang={lang} />
              </div>
            ))
          ) : (
            <p className="dgd-muted">{t(lang, 'glance.noGpus')}</p>
          )}
          <Updated lastOk={st.lastOk} lang={lang} />
          <p className="dgd-muted" style={{ margin: 0, fontSize: 12 }}>
            {t(lang, 'glance.more')}
          </p>
        </>
      ) : null}
    </section>
  )
}
