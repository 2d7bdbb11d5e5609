// The efficiency strip of the GPU view (under the hero), the facts of the shared
// sidecar/static/shared/efficiency.js, and the MIG list of a GPU card, from view_model.js (the standalone
// page draws the same ones, with the same words).
// Plain function components without hooks (test/efficiency.test.mjs renders them without React).
import { t } from '../../../sidecar/static/shared/format.js'
import { efficiency } from '../../../sidecar/static/shared/efficiency.js'

function Item({ it }) {
  return (
    <span className={`dgd-eff-item${it.flag ? ` dgd-eff-${it.flag}` : ''}`} data-testid={`dsh-gpu-eff-${it.key}`} data-flag={it.flag || undefined}>
      <span className="dgd-muted">{it.label}</span> <b>{it.value}</b>
      {it.note ? <span className="dgd-eff-note"> {it.note}</span> : null}
    </span>
  )
}

function Items({ items, testid }) {
  return (
    <div className="dgd-eff-items" data-testid={testid}>
      {items.map((it) => (
        <Item key={it.key} it={it} />
      ))}
    </div>
  )
}

function StepBar({ step, syncs, lang }) {
  return (
    <div className="dgd-eff-group dgd-eff-step" data-testid="dsh-gpu-eff-step">
      <h4>{t(lang, 'eff.step.title')}</h4>
      {step ? (
        <>
          <div className="dgd-eff-stack" data-testid="dsh-gpu-eff-stack">
            {step.segments
              .filter((s) => s.fraction > 0)
              .map((s) => (
                <span
                  key={s.key}
                  data-testid="dsh-gpu-eff-seg"
                  data-key={s.key}
                  data-fraction={s.fraction.toFixed(4)}
                  title={s.text}
                  style={{ width: `${(s.fraction * 100).toFixed(2)}%`, background: s.color }}
                />
              ))}
          </div>
          <div className="dgd-eff-legend">
            {step.segments.map((s) => (
              <span key={s.key} data-key={s.key}>
                <i style={{ background: s.color }} />
                {s.text}
              </span>
            ))}
          </div>
          <div className="dgd-muted">{step.summary}</div>
        </>
      ) : (
        <div className="dgd-muted">{t(lang, 'eff.step.none')}</div>
      )}
      {syncs ? <Items items={[syncs]} /> : null}
    </div>
  )
}

function GpuFacts({ gpu }) {
  return (
    <div className="dgd-eff-group" data-testid="dsh-gpu-eff-gpu" data-index={gpu.index}>
      <h4>
        {gpu.title}
        {gpu.cc ? <span className="dgd-muted"> · {gpu.cc}</span> : null}
      </h4>
      <Items items={gpu.items} />
      {gpu.reasons.length ? (
        <div className="dgd-eff-reasons" data-testid="dsh-gpu-eff-reasons">
          {gpu.reasons.map((r) => (
            <span key={r.name} className={`dgd-tag dgd-eff-reason-${r.kind}`} data-reason={r.name} data-kind={r.kind}>
              {r.label}
            </span>
          ))}
        </div>
      ) : gpu.reasonsNone ? (
        <div className="dgd-muted" data-testid="dsh-gpu-eff-reasons">
          {gpu.reasonsNone}
        </div>
      ) : null}
      {gpu.gpm.length ? <Items items={gpu.gpm.map((g) => ({ ...g, key: `gpm-${g.key}` }))} testid="dsh-gpu-eff-gpm" /> : null}
      {gpu.gpmNa ? (
        <div className="dgd-muted" data-testid="dsh-gpu-eff-gpm-na">
          {gpu.gpmNa}
        </div>
      ) : null}
    </div>
  )
}

function Group({ title, items, testid }) {
  if (!items.length) return null
  return (
    <div className="dgd-eff-group" data-testid={testid}>
      <h4>{title}</h4>
      <Items items={items} />
    </div>
  )
}

/** The job's efficiency facts; nothing when there are none. */
export function EfficiencyStrip({ doc, lang }) {
  const eff = doc ? efficiency(doc, lang) : null
  if (!eff || eff.empty) return null
  return (
    <section className="dgd-card dgd-eff" data-testid="dsh-gpu-efficiency">
      <h3 className="dgd-section-title">{t(lang, 'eff.title')}</h3>
      <div className="dgd-eff-groups">
        <StepBar step={eff.step} syncs={eff.syncs} lang={lang} />
        {eff.gpu ? <GpuFacts gpu={eff.gpu} /> : null}
        <Group title={t(lang, 'eff.precision')} items={eff.precision} testid="dsh-gpu-eff-precision" />
        <Group title={t(lang, 'eff.loader')} items={eff.loader} testid="dsh-gpu-eff-loader" />
      </div>
    </section>
  )
}

/** The MIG instances of a GPU card (view_model.js gpuCard's `mig`), or nothing when MIG is off. */
export function MigList({ mig }) {
  if (!mig) return null
  return (
    <div className="dgd-gpu-foot" data-testid="dsh-gpu-mig">
      {mig.title}
      <ul className="dgd-gpu-procs">
        {mig.rows.map((r) => (
          <li key={r.index} data-testid="dsh-gpu-mig-device" data-mig-index={r.index}>
            <span className="dgd-mono">{r.label}</span>
            {r.ids ? <span className="dgd-muted">{r.ids}</span> : null}
            {r.pidsText ? <span>{r.pidsText}</span> : null}
            <b>{r.mem}</b>
          </li>
        ))}
      </ul>
    </div>
  )
}
