// The folder `dsh web` starts in becomes a DSH workspace (config `launchWorkspace`, default true).
//
// DSH 0.1.0-rc.8 has no flag or variable that names a workspace: its web page creates a session only
// in a registered workspace (a record under $DSH_HOME), and a fresh home has none, so the page asks
// the user to choose one in a folder browser that opens at the home folder. A session's GPU tab
// links the jobs under its workspace, so a user who opened their home there saw every job as "not
// linked". Registering the launch folder makes the README's `"$DSH" web  # from your project's
// folder` true: on a fresh home DSH opens a New Session in it (its most recent workspace), and the
// workspace menu lists it beside any others. Home and / are never registered (they hold every job).
import fs from 'node:fs'
import os from 'node:os'

/**
 * The folder to register, or why none: {path} or {skip: reason}.
 * @param {string} cwd the directory DSH was started in
 * @param {string} home the user's home folder
 */
export function launchFolder(cwd, home) {
  const real = (p) => {
    try {
      return fs.realpathSync(p)
    } catch {
      return null
    }
  }
  const path = real(cwd)
  if (!path) return { skip: `${cwd} cannot be resolved` }
  if (path === '/') return { skip: 'DSH was started in / (start `dsh web` in the project folder)' }
  if (home && path === real(home)) return { skip: 'DSH was started in the home folder (start `dsh web` in the project folder)' }
  return { path }
}

/**
 * Register `launchFolder(...)` with DSH's workspace registry once it is there (ctx.inject: it never
 * holds DSH's boot, and a DSH without the registry just goes without). Never throws.
 * @param ctx the plugin's Cordis context
 * @param {{enabled: boolean, log: {info: Function, warn: Function}, cwd?: string, home?: string}} options
 * @returns {{state: 'off'|'skipped'|'waiting'|'registered'|'failed'|'unavailable', path: string|null, detail: string|null}}
 *   what happened, as /api/config shows it (updated in place once the registry answers)
 */
export function registerLaunchWorkspace(ctx, { enabled, log, cwd = process.cwd(), home = os.homedir() }) {
  const status = { state: 'off', path: null, detail: null }
  if (!enabled) return status
  const folder = launchFolder(cwd, home)
  if (folder.skip) {
    Object.assign(status, { state: 'skipped', detail: folder.skip })
    log.info(`launchWorkspace: no workspace registered: ${folder.skip}`)
    return status
  }
  const failed = (detail) => {
    Object.assign(status, { state: 'failed', detail })
    log.warn(`launchWorkspace: could not register ${folder.path}: ${detail}`)
  }
  const unavailable = () => {
    Object.assign(status, { state: 'unavailable', detail: 'this DSH has no workspace registry' })
    log.info(`launchWorkspace: ${status.detail}`)
  }
  Object.assign(status, { state: 'waiting', path: folder.path })
  try {
    if (!ctx || typeof ctx.inject !== 'function') {
      unavailable()
      return status
    }
    ctx.inject(['workspaceRegistry'], (wctx) => {
      const registry = wctx && wctx.workspaceRegistry
      if (!registry || typeof registry.create !== 'function') return void unavailable()
      // create() answers the existing record for a known path: a restart registers nothing new
      Promise.resolve()
        .then(() => registry.create(folder.path))
        .then(
          () => {
            status.state = 'registered'
            log.info(`launchWorkspace: ${folder.path} is a DSH workspace`)
          },
          (err) => failed(String((err && err.message) || err)),
        )
    })
  } catch (err) {
    failed(String((err && err.message) || err))
  }
  return status
}
