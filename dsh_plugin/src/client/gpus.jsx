// The GPU cards of the GPU view and the meters the glance card shows too: the cells of the shared view
// model (sidecar/static/shared/view_model.js, the standalone page lays out the same ones).
// Plain function components without hooks (tests render them without React).
import { t } from '../../../sidecar/static/shared/format.js'
import { gpuCards, gpuMeters } from '../../../sidecar/static/shared/view_model.js'
import { MigList } from './efficiency.jsx'

const isNum = (x) => typeof x === 'number' && Number.isFinite(x)

function Meter({ m }) {
  const w = isNum(m.pct) ? Math.max(0, Math.min(100, m.pct)) : 0
  return (
    // no figure (the driver tells none): a hatched bar, never an empty one that reads as 0
    <div className="dgd-meter" data-key={m.key} data-unknown={isNum(m.pct) ? undefined : 'true'}>
      <span className="dgd-meter-label">{m.label}</span>
      <span className="dgd-bar" role="meter" aria-label={m.label} aria-valuenow={isNum(m.pct) ? Math.round(m.pct) : undefined}>
        <i style={{ width: `${w}%`, background: m.color }} />
      </span>
      <span className="dgd-meter-value">{m.value}</span>
    </div>
  )
}

/** A GPU's utilisation and memory meters (view_model.js gpuMeters). */
export function GpuMeters({ gpu, lang }) {
  return (
    <div className="dgd-meters">
      {gpuMeters(gpu, lang).map((m) => (
        <Meter key={m.key} m={m} />
      ))}
    </div>
  )
}

const TAG_CLASS = { model: 'dgd-tag dgd-tag-ok', off: 'dgd-tag dgd-tag-warn' }

function GpuCard({ c }) {
  return (
    <article className="dgd-card" data-testid="dsh-gpu-card" data-index={c.index ?? ''} data-vendor={c.vendor} data-model-here={c.modelHere ? 'true' : 'false'} data-util-level={c.utilLevel}>
      <div className="dgd-gpu-head">
        <span className="dgd-gpu-index">{c.title}</span>
        {c.tag ? <span className={TAG_CLASS[c.tag.kind]}>{c.tag.text}</span> : null}
      </div>
      <div className="dgd-gpu-name" title={c.nameTitle}>
        {c.name}
      </div>
      <div className="dgd-muted" data-testid="dsh-gpu-framework">
        {c.framework}
      </div>
      <div className="dgd-meters">
        {c.meters.map((m) => (
          <Meter key={m.key} m={m} />
        ))}
      </div>
      <div className="dgd-gpu-foot">
        {c.procsTitle}
        {c.procs.length ? (
          <ul className="dgd-gpu-procs">
            {c.procs.map((p) => (
              <li key={`${p.pid}`} data-pid={p.pid}>
                <span className="dgd-mono">{p.pid}</span>
                <span>{p.role}</span>
                <b>{p.mem}</b>
                {p.util ? (
                  <span className="dgd-gpu-proc-util" data-testid="dsh-gpu-proc-util">
                    {p.util}
                  </span>
                ) : null}
              </li>
            ))}
          </ul>
        ) : (
          <div className="dgd-muted">{c.noProcs}</div>
        )}
        {c.others ? (
          <div className="dgd-muted" data-testid="dsh-gpu-others">
            {c.others}
          </div>
        ) : null}
      </div>
      <MigList mig={c.mig} />
    </article>
  )
}

function IgpuCard({ c }) {
  return (
    <article className="dgd-card" data-testid="dsh-gpu-igpu" data-pci={c.pci}>
      <div className="dgd-gpu-head">
        <span className="dgd-gpu-index">{c.vendor}</span>
        <span className="dgd-tag dgd-tag-warn">{c.badge}</span>
      </div>
      <div className="dgd-gpu-name" title={c.name}>
        {c.name}
      </div>
      <div className="dgd-muted">{c.note}</div>
      <div className="dgd-gpu-foot">{c.meta}</div>
    </article>
  )
}

export function GpuCards({ doc, lang }) {
  const vm = gpuCards(doc, lang)
  return (
    <section data-testid="dsh-gpu-gpus">
      <h3 className="dgd-section-title">{t(lang, 'gpus.title')}</h3>
      {vm.none ? (
        <div className="dgd-card dgd-muted" data-testid="dsh-gpu-no-gpu">
          {vm.none.text}
          {vm.none.error ? <div className="dgd-bad">{vm.none.error}</div> : null}
        </div>
      ) : null}
      <div className="dgd-gpu-grid">
        {vm.cards.map((c, i) => (
          <GpuCard key={`gpu-${c.index ?? i}`} c={c} />
        ))}
        {vm.unusable.map((c, i) => (
          <IgpuCard key={`sys-${c.pci || i}`} c={c} />
        ))}
      </div>
    </section>
  )
}
