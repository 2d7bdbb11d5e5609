// host/workspace.js: the folder `dsh web` starts in becomes a DSH workspace (config launchWorkspace).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { normalizeConfig } from '../host/core.js'
import { launchFolder, registerLaunchWorkspace } from '../host/workspace.js'

const quiet = () => {
  const lines = []
  return { lines, info: (m) => lines.push(`info ${m}`), warn: (m) => lines.push(`warn ${m}`) }
}

/** A Cordis-like ctx whose inject hands the callback a registry (or none) on the next turn. */
function ctxWith(registry) {
  const injected = []
  return {
    injected,
    inject(names, callback) {
      injected.push(names)
      setImmediate(() => callback({ workspaceRegistry: registry }))
    },
  }
}

// Until a registration leaves 'waiting' (DSH's callback, then the registry's promise), at most 5 s:
// a fixed delay loses the race to the callback's setImmediate on a loaded machine.
const settled = async (status) => {
  const deadline = Date.now() + 5000
  while (status.state === 'waiting' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5))
}

describe('launchFolder', () => {
  test('the real path of the launch folder; never / nor the home folder', () => {
    const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'dgd-ws-')))
    try {
      const project = path.join(base, 'project')
      const home = path.join(base, 'home')
      fs.mkdirSync(project)
      fs.mkdirSync(home)
      fs.symlinkSync(project, path.join(base, 'link'))
      assert.deepEqual(launchFolder(project, home), { path: project })
      assert.deepEqual(launchFolder(path.join(base, 'link'), home), { path: project })
      assert.match(launchFolder(home, home).skip, /home folder/)
      assert.match(launchFolder(path.join(base, 'link', '..', 'home'), home).skip, /home folder/)
      assert.match(launchFolder('/', home).skip, /started in \//)
      assert.match(launchFolder(path.join(base, 'gone'), home).skip, /cannot be resolved/)
    } finally {
      fs.rmSync(base, { recursive: true, force: true })
    }
  })
})

describe('registerLaunchWorkspace', () => {
  test('registers the folder once the registry is there, and says so', async () => {
    const created = []
    const ctx = ctxWith({ create: async (p) => (created.push(p), { id: 'w1' }) })
    const log = quiet()
    const home = os.homedir()
    const status = registerLaunchWorkspace(ctx, { enabled: true, log, cwd: os.tmpdir(), home })
    const folder = fs.realpathSync(os.tmpdir())
    assert.deepEqual(ctx.injected, [['workspaceRegistry']])
    assert.deepEqual(status, { state: 'waiting', path: folder, detail: null })
    await settled(status)
    assert.deepEqual(created, [folder])
    assert.equal(status.state, 'registered')
    assert.ok(log.lines.some((l) => l.startsWith('info ') && l.includes(folder)), log.lines)
  })

  test('off, skipped, refused and missing registries are states, never exceptions', async () => {
    const log = quiet()
    const never = { inject: () => assert.fail('inject must not be called') }
    assert.equal(registerLaunchWorkspace(never, { enabled: false, log }).state, 'off')
    const home = registerLaunchWorkspace(never, { enabled: true, log, cwd: os.homedir(), home: os.homedir() })
    assert.equal(home.state, 'skipped')
    assert.match(home.detail, /home folder/)

    const refused = registerLaunchWorkspace(ctxWith({ create: async () => { throw new Error('not a directory') } }), {
      enabled: true, log, cwd: os.tmpdir(), home: os.homedir(),
    })
    await settled(refused)
    assert.equal(refused.state, 'failed')
    assert.match(refused.detail, /not a directory/)
    assert.ok(log.lines.some((l) => l.startsWith('warn ') && l.includes('not a directory')), log.lines)

    const none = registerLaunchWorkspace(ctxWith(undefined), { enabled: true, log, cwd: os.tmpdir(), home: os.homedir() })
    await settled(none)
    assert.equal(none.state, 'unavailable')
    assert.equal(registerLaunchWorkspace({}, { enabled: true, log, cwd: os.tmpdir(), home: os.homedir() }).state, 'unavailable')
    const throwing = { inject: () => { throw new Error('no such service') } }
    assert.equal(registerLaunchWorkspace(throwing, { enabled: true, log, cwd: os.tmpdir(), home: os.homedir() }).state, 'failed')
  })

  test('the config key: true by default, a bad value warns and keeps true', () => {
    assert.equal(normalizeConfig({}).config.launchWorkspace, true)
    assert.equal(normalizeConfig({ launchWorkspace: false }).config.launchWorkspace, false)
    const bad = normalizeConfig({ launchWorkspace: 'no' })
    assert.equal(bad.config.launchWorkspace, true)
    assert.deepEqual(bad.warnings, ['launchWorkspace must be true or false (got "no"); using true'])
  })
})
