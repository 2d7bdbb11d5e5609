// Two real users: our sidecar's port taken over by another user's listener (uid 65534, via setpriv)
// after our sidecar stops. The proxy and the agent tool must send it nothing (no token) and say
// why, every time, not only at start. Skipped where this test cannot switch users (not root).
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import http from 'node:http'
import { after, describe, test } from 'node:test'
import { normalizeConfig } from '../host/core.js'
import { createHandler } from '../host/index.js'
import { gpuStatus } from '../host/tool.js'

const quiet = { info() {}, warn() {}, error() {} }
const NOBODY = 65534
// the stranger: answers every GET with a made-up verdict and prints each request's headers
const STRANGER = `
const http = require('node:http')
const s = http.createServer((req, res) => {
  console.log(JSON.stringify({ url: req.url, headers: req.headers }))
  res.writeHead(200, { 'Content-Type': 'application/json' })
  res.end(JSON.stringify({ schema: 2, jobs: [], status: 'GPU', message: 'Yes: the model is on cuda:0' }))
})
s.listen(Number(process.argv[1]), '127.0.0.1', () => console.log(s.address().port))
`

// the same, but binding the port 2 ms at a time with 2 ms free between (racing a check of the port's
// listener before connecting); answers what reached it while bound
const TOGGLER = `
const net = require('node:net')
const DOC = JSON.stringify({ schema: 2, jobs: [], status: 'GPU', message: 'Yes: the model is on cuda:0' })
const cycle = () => {
  const s = net.createServer((c) => {
    let buf = ''
    c.on('error', () => {})
    c.on('data', (d) => {
      buf += d
      if (!buf.includes('\\r\\n\\r\\n')) return
      const auth = /^authorization:\\s*(.*)$/im.exec(buf)
      console.log(JSON.stringify({ url: buf.split(' ')[1], headers: { authorization: auth ? auth[1].trim() : undefined } }))
      c.end('HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nConnection: close\\r\\nContent-Length: ' + DOC.length + '\\r\\n\\r\\n' + DOC)
    })
  })
  s.on('error', () => setTimeout(cycle, 2))
  s.listen(Number(process.argv[1]), '127.0.0.1', () => setTimeout(() => s.close(() => {}) && setTimeout(cycle, 2), 2))
}
cycle()
console.log(process.argv[1])
`

function startStranger(port, script = STRANGER) {
  return new Promise((resolve) => {
    const child = spawn('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', process.execPath, '-e', script, String(port)], {
      stdio: ['ignore', 'pipe', 'ignore'],
      cwd: '/',
    })
    const seen = []
    let buf = ''
    let started = false
    child.on('error', () => resolve(null))
    child.on('exit', () => started || resolve(null))
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk) => {
      buf += chunk
      let nl
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl)
        buf = buf.slice(nl + 1)
        if (!started && /^\d+$/.test(line)) {
          started = true
          resolve({ child, seen, port: Number(line) })
        } else if (started) seen.push(JSON.parse(line))
      }
    })
  })
}

function listen(handler, port = 0) {
  return new Promise((resolve) => {
    const server = http.createServer(handler)
    server.listen(port, '127.0.0.1', () => resolve(server))
  })
}

function get(port, path) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, headers: { Host: `127.0.0.1:${port}` }, agent: false }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) }))
    })
    req.on('error', reject)
    req.end()
  })
}

const canSwitchUser = typeof process.getuid === 'function' && process.getuid() === 0

describe('a port another user took over', { skip: !canSwitchUser && 'needs root to run a second user' }, () => {
  const cleanup = []
  after(async () => {
    for (const fn of cleanup.reverse()) await fn()
  })

  test('the proxy and the tool send nothing there, though our sidecar answered before', async (t) => {
    const asked = []
    const ours = await listen((req, res) => {
      asked.push(req.headers.authorization)
      res.writeHead(200, { 'Content-Type': 'application/json', Connection: 'close' })
      res.end(JSON.stringify({ schema: 2, mode: 'discovery', jobs: [], status: 'CPU' }))
    })
    const port = ours.address().port
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${port}`, token: 'victims-token', timeoutMs: 1000, autostart: false })
    const handler = createHandler(config, quiet)
    const proxy = await listen(handler)
    cleanup.push(() => new Promise((r) => proxy.close(r)), () => handler.close())
    const proxyPort = proxy.address().port

    let r = await get(proxyPort, '/dsh-gpu-dashboard/api/status')
    assert.equal(r.status, 200)
    assert.deepEqual(asked, ['Bearer victims-token'])

    // our sidecar stops; another user binds the same port
    ours.closeAllConnections()
    await new Promise((res) => ours.close(res))
    handler.close() // no kept-alive socket to the old listener: every request below opens a new one
    const stranger = await startStranger(port)
    if (!stranger) return t.skip('setpriv or node not usable by another user here')
    cleanup.push(() => stranger.child.kill('SIGKILL'))

    r = await get(proxyPort, '/dsh-gpu-dashboard/api/status')
    assert.equal(r.status, 502)
    assert.equal(r.json.error, 'sidecar-unreachable')
    assert.match(r.json.detail, /another user \(uid 65534\).*no token/)
    const tool = await gpuStatus({}, {}, { handler, deps: {} })
    assert.match(tool.error, /another user \(uid 65534\)/)
    assert.deepEqual(tool.jobs, [])
    assert.deepEqual(stranger.seen, [], 'a request (and the token) reached another user')
  })

  test('a user who binds the port in 2 ms bursts gets no request and no token in 200 page polls and tool calls', async (t) => {
    const free = await listen(() => {})
    const port = free.address().port
    await new Promise((r) => free.close(r))
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${port}`, token: 'victims-token', timeoutMs: 1000, autostart: false })
    const handler = createHandler(config, quiet)
    const proxy = await listen(handler)
    cleanup.push(() => new Promise((r) => proxy.close(r)), () => handler.close())
    const stranger = await startStranger(port, TOGGLER)
    if (!stranger) return t.skip('setpriv or node not usable by another user here')
    cleanup.push(() => stranger.child.kill('SIGKILL'))
    const told = []
    const answered = [] // what came back as if a sidecar had answered
    for (let n = 0; n < 200; n++) {
      if (n % 2) {
        const r = await get(proxy.address().port, '/dsh-gpu-dashboard/api/status')
        if (r.status !== 502) answered.push(r.json)
        told.push(String(r.json.detail))
      } else {
        const tool = await gpuStatus({}, {}, { handler, deps: {} })
        if (!tool.error) answered.push(tool)
        told.push(String(tool.error))
      }
    }
    const tokens = stranger.seen.filter((r) => r.headers.authorization).length
    assert.deepEqual(stranger.seen, [], `${stranger.seen.length} requests (${tokens} with the token) reached another user`)
    assert.deepEqual(answered, [])
    assert.ok(told.some((d) => /another user \(uid 65534\)/.test(d)), 'the listener was never met: no race was run')
    assert.ok(!told.some((d) => /cuda:0/.test(d)))
  })
})
