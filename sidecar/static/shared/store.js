/**
 * store.js — the data layer the page (page/feed.js, page/app.js) and the DSH plugin
 * (dsh_plugin/src/client/store.js) share: what a browser keeps of one job's history, and how a
 * /status or /history answer changes it. Pure: no DOM, no fetch; each function returns a new
 * history and leaves its argument as it was.
 *
 *   HISTORY_MAX_SAMPLES   the samples a browser keeps of one job (the newest; the sidecar's ring may hold
 *                         more: --history up to a day)
 *   HISTORY_MAX_EVENTS    the events it keeps (the newest)
 *   emptyHistory(jobId)   {jobId, samples, events, intervalS, lastTime, error}: nothing yet. `samples` and
 *                         `events` oldest first, one per time (events: per time, name and pid);
 *                         `lastTime` the newest sample's time, what the next /history?since= asks after.
 *   mergeSamples(have, fresh)  `have` and `fresh` together: sorted by time, one sample per time (the one
 *                         kept first wins), the newest HISTORY_MAX_SAMPLES.
 *   mergeEvents(have, fresh)   the same for events (key: time, name, pid), the newest HISTORY_MAX_EVENTS.
 *   withStatus(history, doc)   after a status document: another job's (its job_id: the job chosen, or
 *                         the sidecar's default one, changed) starts an empty history; its events are merged.
 *   withHistory(history, body, since)  after the /history answer to ?since=`since` (null: none, the
 *                         whole ring): its samples and events merged. It is dropped when it was asked
 *                         of another history than this one: of another job than the one kept, or
 *                         after a sample no longer the newest kept (a status document of another job
 *                         came meanwhile); the next one, without ?since= after that reset, brings the
 *                         new job's whole ring, not just its samples after the old job's newest.
 */

// 20,000 samples: over 8 h at the page's default 1.5 s, 11 h at the plugin's 2 s, for the charts' "all".
export const HISTORY_MAX_SAMPLES = 20000;
export const HISTORY_MAX_EVENTS = 500;

const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const byTime = (a, b) => a.time_unix_s - b.time_unix_s;

export function emptyHistory(jobId = null) {
  return { jobId, samples: [], events: [], intervalS: null, lastTime: null, error: null };
}

/**
 * `list` (sorted by time) with one item per key, the first of each kept. Sorting is stable, so an
 * item already kept (put first) wins over a fresh one of the same key.
 */
function unique(list, keyOf) {
  const out = [];
  const seen = new Set();
  let time = null;
  for (const item of list) {
    // items of equal time are adjacent: only those need telling apart
    if (item.time_unix_s !== time) {
      time = item.time_unix_s;
      seen.clear();
    }
    const key = keyOf(item);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(item);
  }
  return out;
}

/** `have` (sorted and unique) with `fresh`: sorted, unique, the newest `cap`; `have` itself when nothing is new. */
function merge(have, fresh, keyOf, cap) {
  const old = Array.isArray(have) ? have : [];
  const add = (Array.isArray(fresh) ? fresh : []).filter((x) => x && typeof x === 'object' && isNum(x.time_unix_s));
  if (!add.length) return old;
  add.sort(byTime);
  let out;
  if (!old.length || add[0].time_unix_s > old[old.length - 1].time_unix_s) {
    out = old.concat(unique(add, keyOf)); // the usual case, newer ones only: what is kept is not sorted again
  } else {
    out = unique(old.concat(add).sort(byTime), keyOf);
    if (out.length === old.length) return old; // every one already kept (each of `old` stays, first of its key)
  }
  return out.length > cap ? out.slice(out.length - cap) : out;
}

const sampleKey = () => '';
const eventKey = (e) => `${e.name}|${e.pid}`;

export function mergeSamples(have, fresh) {
  return merge(have, fresh, sampleKey, HISTORY_MAX_SAMPLES);
}

export function mergeEvents(have, fresh) {
  return merge(have, fresh, eventKey, HISTORY_MAX_EVENTS);
}

/** A job id as a document carries it, or null (an older sidecar's). */
const jobOf = (doc) => (doc && typeof doc.job_id === 'string' && doc.job_id ? doc.job_id : null);

/** Another job than the one `history` keeps (a history of no job yet is anyone's). */
const another = (history, jobId) => jobId !== null && history.jobId !== null && jobId !== history.jobId;

export function withStatus(history, doc) {
  const job = jobOf(doc);
  const base = another(history, job) ? emptyHistory(job) : history;
  const events = mergeEvents(base.events, doc && doc.events);
  const jobId = base.jobId ?? job;
  return base === history && events === history.events && jobId === history.jobId ? history : { ...base, jobId, events };
}

export function withHistory(history, body, since = null) {
  const job = jobOf(body);
  if (!body || !Array.isArray(body.samples) || another(history, job)) return history;
  if (since !== null && since !== history.lastTime) return history;
  const samples = mergeSamples(history.samples, body.samples);
  return {
    jobId: history.jobId ?? job,
    samples,
    events: mergeEvents(history.events, body.events),
    intervalS: isNum(body.interval_s) ? body.interval_s : history.intervalS,
    lastTime: samples.length ? samples[samples.length - 1].time_unix_s : history.lastTime,
    error: null,
  };
}
