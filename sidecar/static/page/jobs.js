// jobs.js — the job switcher of the standalone page (discovery mode: the sidecar watches several
// jobs). Shown when the status document lists more than one job; picking one asks /status and
// /history for it (?job=ID), and the address keeps the choice so a reload shows the same job.

import { STATUS_COLORS, cmdText, statusOf } from '../shared/format.js';

/** The query string that selects `job` (none: the sidecar's default job), plus `extra` pairs. */
export function jobQuery(job, extra = {}) {
  const q = new URLSearchParams();
  if (job) q.set('job', job);
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** One line per job, newest first (as /jobs orders them); the shown job is pressed. */
export function renderJobs(nav, doc, { h, tr, onPick }) {
  const jobs = doc && Array.isArray(doc.jobs) ? doc.jobs : [];
  nav.hidden = jobs.length < 2;
  if (nav.hidden) return;
  const shown = doc.job_id;
  const items = jobs.map((j) => {
    const status = statusOf(j);
    const cmd = cmdText(j.command) || String(j.root_pid);
    const b = h(
      'button',
      {
        type: 'button',
        class: `job${j.alive ? '' : ' exited'}`,
        'data-testid': 'job',
        'data-job-id': j.id,
        'data-status': status,
        'aria-pressed': j.id === shown ? 'true' : 'false',
        title: `${j.id}: ${j.message || ''}`,
      },
      h('i', { class: 'job-dot', style: `background:${STATUS_COLORS[status]}` }),
      h('span', { class: 'job-cmd', text: cmd.length > 60 ? `${cmd.slice(0, 59)}…` : cmd }),
      h('span', { class: 'job-meta', text: [j.user, j.alive ? null : tr('jobs.exited')].filter(Boolean).join(' · ') }),
    );
    b.addEventListener('click', () => onPick(j.id));
    return b;
  });
  nav.replaceChildren(h('span', { class: 'jobs-title', text: tr('jobs.title', { n: jobs.length }) }), ...items);
}
