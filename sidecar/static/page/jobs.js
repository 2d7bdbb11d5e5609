// jobs.js — the job switcher of the standalone page (discovery mode: the sidecar watches several
// jobs). Shown when the status document lists more than one job, in the order and with the rows of
// the shared view model (view_model.js jobList: the viewer's own live jobs first, then the other
// live ones, the newest first within each, then the exited ones, collapsed); picking one asks /status and /history for it (?job=ID, feed.js), and the address
// keeps the choice so a reload shows the same job.

import { STATUS_COLORS } from '../shared/format.js';
import { jobList } from '../shared/view_model.js';

const CMD_MAX_CHARS = 60;

// The exited jobs' disclosure as the user left it (null: as jobList says, open only to show the chosen job).
let exitedOpen = null;
let drawn = null;

function jobButton(row, { h, onPick }) {
  const cmd = row.cmd || row.pid;
  const b = h(
    'button',
    {
      type: 'button',
      class: `job${row.alive ? '' : ' exited'}`,
      'data-testid': 'job',
      'data-job-id': row.id,
      'data-status': row.status,
      'aria-pressed': row.shown ? 'true' : 'false',
      title: `${row.id}: ${row.message}`,
    },
    h('i', { class: 'job-dot', style: `background:${STATUS_COLORS[row.status]}` }),
    h('span', { class: 'job-cmd', text: cmd.length > CMD_MAX_CHARS ? `${cmd.slice(0, CMD_MAX_CHARS - 1)}…` : cmd }),
    h('span', { class: 'job-meta', text: [row.user, row.exited].filter(Boolean).join(' · ') }),
  );
  b.addEventListener('click', () => onPick(row.id));
  return b;
}

/** The jobs of `doc` into `nav`: the live ones, then "Exited jobs (N)" over the exited ones. */
export function renderJobs(nav, doc, { h, tr, lang, onPick }) {
  const jobs = doc && Array.isArray(doc.jobs) ? doc.jobs : [];
  nav.hidden = jobs.length < 2;
  if (nav.hidden) return;
  const vm = jobList(jobs, lang, doc.job_id);
  const open = exitedOpen ?? vm.exitedOpen;
  const key = JSON.stringify([vm, open]);
  if (key === drawn) return; // unchanged: keep the buttons (focus, hover) as they are
  drawn = key;
  const button = (row) => jobButton(row, { h, onPick });
  let exited = null;
  if (vm.exited.length) {
    exited = h('details', { class: 'jobs-exited', 'data-testid': 'jobs-exited', 'data-count': vm.exited.length },
      h('summary', { text: vm.exitedLabel }), vm.exited.map(button));
    exited.open = open;
    exited.addEventListener('toggle', () => {
      // the user's choice, kept until it is the default again (setting `open` above fires this too)
      exitedOpen = exited.open === vm.exitedOpen ? null : exited.open;
      drawn = JSON.stringify([vm, exited.open]);
    });
  }
  nav.replaceChildren(h('span', { class: 'jobs-title', text: tr('jobs.title', { n: jobs.length }) }), ...vm.live.map(button), ...(exited ? [exited] : []));
}
