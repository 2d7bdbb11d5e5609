// feed.js — the page's data: each poll fetches the status document, then the history after it
// (?since= the newest sample kept), and keeps both with the data layer the DSH plugin shares
// (../shared/store.js). No DOM here: dsh_plugin/test/store.test.mjs runs it beside the plugin's store.

import { schemaMismatch } from '../shared/format.js';
import { withHistory, withStatus } from '../shared/store.js';

export const STATUS_URL = 'api/dsh-gpu-dashboard/status';
export const HISTORY_URL = 'api/dsh-gpu-dashboard/history';

/** The query string that selects `job` (none: the sidecar's default job), plus `extra` pairs. */
export function jobQuery(job, extra = {}) {
  const q = new URLSearchParams();
  if (job) q.set('job', job);
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * One poll of `job` (null: the sidecar's default): {doc, history}, the history (store.js's) after
 * the status document and the /history answer. A status that fails, or of another schema, throws
 * (the page then says why); a history that fails leaves the history as it was.
 * @param {(url: string) => Promise<any>} fetchJSON
 */
export async function pollJob(fetchJSON, { job, history, lang }) {
  const doc = await fetchJSON(STATUS_URL + jobQuery(job));
  const mismatch = schemaMismatch(doc, lang);
  if (mismatch) throw new Error(mismatch);
  let next = withStatus(history, doc);
  try {
    const since = next.lastTime;
    next = withHistory(next, await fetchJSON(HISTORY_URL + jobQuery(job, { since })), since);
  } catch { /* the charts keep what they have */ }
  return { doc, history: next };
}
