// strip.js — the page's efficiency strip (under the summary), drawn from the facts of efficiency.js, and
// the MIG list of a GPU card, from view_model.js (both shared with the DSH plugin).

import { t } from '../shared/format.js';
import { efficiency } from '../shared/efficiency.js';
import { h } from './dom.js';

function item(it) {
  return h('div', { class: `eff-item${it.flag ? ` eff-${it.flag}` : ''}`, 'data-testid': `eff-${it.key}`, 'data-flag': it.flag || null },
    h('span', { class: 'eff-label', text: it.label }),
    h('b', { class: 'eff-value', text: it.value }),
    it.note ? h('span', { class: 'eff-note', text: it.note }) : null);
}

function stepBlock(step, syncs, lang) {
  const syncLine = syncs ? h('div', { class: 'eff-items' }, item(syncs)) : null;
  if (!step) return h('div', { class: 'eff-group eff-step', 'data-testid': 'eff-step' }, h('h3', { text: t(lang, 'eff.step.title') }), h('div', { class: 'eff-muted', text: t(lang, 'eff.step.none') }), syncLine);
  return h('div', { class: 'eff-group eff-step', 'data-testid': 'eff-step', 'data-pid': step.pid },
    h('h3', { text: t(lang, 'eff.step.title') }),
    h('div', { class: 'eff-stack', 'data-testid': 'eff-stack' }, step.segments.filter((s) => s.fraction > 0).map((s) => h('span', {
      class: `eff-seg eff-seg-${s.key}`, 'data-testid': 'eff-seg', 'data-key': s.key, 'data-fraction': s.fraction.toFixed(4),
      title: s.text, style: `width:${(s.fraction * 100).toFixed(2)}%;background:${s.color}`,
    }))),
    h('div', { class: 'eff-legend' }, step.segments.map((s) => h('span', { 'data-testid': 'eff-seg-label', 'data-key': s.key },
      h('i', { style: `background:${s.color}` }), s.text))),
    h('div', { class: 'eff-muted', 'data-testid': 'eff-step-summary', text: step.summary }),
    syncLine);
}

function gpuBlock(gpu) {
  if (!gpu) return null;
  const reasons = gpu.reasons.map((r) => h('span', { class: `eff-reason eff-reason-${r.kind}`, 'data-testid': 'eff-reason', 'data-reason': r.name, 'data-kind': r.kind, text: r.label }));
  return h('div', { class: 'eff-group eff-gpu', 'data-testid': 'eff-gpu', 'data-index': gpu.index },
    h('h3', null, gpu.title, gpu.cc ? h('span', { class: 'eff-muted', text: ` · ${gpu.cc}` }) : null),
    h('div', { class: 'eff-items' }, gpu.items.map(item)),
    reasons.length ? h('div', { class: 'eff-reasons', 'data-testid': 'eff-reasons' }, reasons)
      : gpu.reasonsNone ? h('div', { class: 'eff-muted', 'data-testid': 'eff-reasons', text: gpu.reasonsNone }) : null,
    gpu.gpm.length ? h('div', { class: 'eff-items', 'data-testid': 'eff-gpm' }, gpu.gpm.map((g) => item({ ...g, key: `gpm-${g.key}` }))) : null,
    gpu.gpmNa ? h('div', { class: 'eff-muted eff-gpm-na', 'data-testid': 'eff-gpm-na', text: gpu.gpmNa }) : null);
}

function listBlock(titleKey, items, testid, lang) {
  if (!items.length) return null;
  return h('div', { class: 'eff-group', 'data-testid': testid }, h('h3', { text: t(lang, titleKey) }), h('div', { class: 'eff-items' }, items.map(item)));
}

/** Draw the strip of `doc` into `root` (a section; hidden when there is nothing to show). */
export function renderStrip(root, doc, lang) {
  const eff = doc ? efficiency(doc, lang) : null;
  root.replaceChildren();
  root.hidden = !eff || eff.empty;
  if (!eff || eff.empty) return;
  root.append(
    h('h2', { class: 'block-title', text: t(lang, 'eff.title') }),
    h('div', { class: 'eff-groups' },
      stepBlock(eff.step, eff.syncs, lang),
      gpuBlock(eff.gpu),
      listBlock('eff.precision', eff.precision, 'eff-precision', lang),
      listBlock('eff.loader', eff.loader, 'eff-loader', lang)));
}

/** The MIG instances of a GPU card (view_model.js gpuCard's `mig`), or null when MIG is off. */
export function migList(mig) {
  if (!mig) return null;
  return h('div', { class: 'gpu-mig', 'data-testid': 'gpu-mig' },
    h('div', { class: 'gpu-procs-title', text: mig.title }),
    h('ul', null, mig.rows.map((r) => h('li', { 'data-testid': 'mig-device', 'data-mig-index': r.index },
      h('span', { class: 'pid', text: r.label }),
      r.ids ? h('span', { class: 'role', text: r.ids }) : null,
      r.pidsText ? h('span', { class: 'role', text: r.pidsText }) : null,
      h('span', { class: 'mem', text: r.mem })))));
}
