// Unit tests of the host half (node --test test/). No DSH needed: the handler is exercised with a
// real node:http server in front of a tiny fake sidecar, both on loopback.
import assert from 'node:assert/strict'
import http from 'node:http'
import { after, before, describe, test } from 'node:test'
import {
  DEFAULT_SIDECAR_URL,
  MAX_BODY_BYTES,
  isAcceptableOrigin,
  isLoopbackHostHeader,
  isLoopbackHostname,
  normalizeConfig,
  parseSidecarUrl,
  resolveRoute,
  sanitizeSince,
} from '../host/core.js'
import { Config, apply, createHandler } from '../host/index.js'

const quiet = { info() {}, warn() {}, error() {} }

describe('loopback checks', () => {
  test('hostnames', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', 'LOCALHOST', '::1', '[::1]', '::ffff:127.0.0.1']) {
      assert.equal(isLoopbackHostname(h), true, h)
    }
    for (const h of ['', '0.0.0.0', '10.0.0.1', '192.168.1.1', 'example.com', '127.0.0.1.nip.io', 'localhost.evil.com', '128.0.0.1', '127.0.0.256', '::2']) {
      assert.equal(isLoopbackHostname(h), false, h)
    }
  })
  test('Host headers', () => {
    for (const h of ['127.0.0.1:4000', 'localhost:1', 'localhost', '[::1]:8080', '127.0.0.1']) {
      assert.equal(isLoopbackHostHeader(h), true, h)
    }
    for (const h of [undefined, '', 'evil.com', 'evil.com:80', '127.0.0.1.evil.com', '127.0.0.1@evil.com', 'localhost:80/x', '[::2]:1', 'user@127.0.0.1']) {
      assert.equal(isLoopbackHostHeader(h), false, String(h))
    }
  })
  test('Origin headers', () => {
    assert.equal(isAcceptableOrigin(undefined), true)
    assert.equal(isAcceptableOrigin('http://127.0.0.1:5173'), true)
    assert.equal(isAcceptableOrigin('http://localhost:1'), true)
    assert.equal(isAcceptableOrigin('https://evil.com'), false)
    assert.equal(isAcceptableOrigin('null'), false)
  })
})

describe('config normalisation never throws and warns', () => {
  test('defaults', () => {
    for (const raw of [undefined, null, {}]) {
      const { config, warnings } = normalizeConfig(raw)
      assert.equal(config.sidecarUrl, DEFAULT_SIDECAR_URL)
      assert.equal(config.token, null)
      assert.equal(config.timeoutMs, 2000)
      assert.deepEqual(warnings, [])
    }
  })
  test('good values', () => {
    const { config, warnings } = normalizeConfig({ sidecarUrl: 'http://localhost:9000/', token: 'abc', timeoutMs: 500 })
    assert.equal(config.sidecarUrl, 'http://localhost:9000')
    assert.equal(config.target.port, 9000)
    assert.equal(config.token, 'abc')
    assert.equal(config.timeoutMs, 500)
    assert.deepEqual(warnings, [])
  })
  test('non-loopback and broken URLs fall back to the default', () => {
    for (const url of ['http://example.com:8765', 'http://10.0.0.5:8765', 'https://127.0.0.1:8765', 'file:///etc/passwd', 'not a url', 'http://u:p@127.0.0.1:1', 'http://127.0.0.1:1/?x=1', 42]) {
      const { config, warnings } = normalizeConfig({ sidecarUrl: url })
      assert.equal(config.sidecarUrl, DEFAULT_SIDECAR_URL, String(url))
      assert.equal(warnings.length, 1, String(url))
    }
  })
  test('bad token, timeout, unknown keys and non-mappings', () => {
    let r = normalizeConfig({ token: 'has space', timeoutMs: 'soon', extra: 1 })
    assert.equal(r.config.token, null)
    assert.equal(r.config.timeoutMs, 2000)
    assert.equal(r.warnings.length, 3)
    r = normalizeConfig(['a'])
    assert.equal(r.config.sidecarUrl, DEFAULT_SIDECAR_URL)
    assert.equal(r.warnings.length, 1)
    r = normalizeConfig('http://127.0.0.1:1')
    assert.equal(r.warnings.length, 1)
  })
  test('the Config schema accepts anything', () => {
    for (const v of [undefined, null, 1, 'x', { sidecarUrl: 5 }]) {
      const out = Config['~standard'].validate(v)
      assert.equal(out.issues, undefined)
    }
  })
  test('parseSidecarUrl keeps a base path and IPv6', () => {
    assert.equal(parseSidecarUrl('http://[::1]:8765/base/').url, 'http://[::1]:8765/base')
    assert.equal(parseSidecarUrl('http://127.0.0.1:8765').basePath, '')
  })
})

describe('route table', () => {
  test('known routes only', () => {
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/status'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/status' })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/status?x=../../etc'), { kind: 'proxy', upstreamPath: '/api/dsh-gpu-dashboard/status' })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/history?since=1733140000.5'), {
      kind: 'proxy',
      upstreamPath: '/api/dsh-gpu-dashboard/history?since=1733140000.5',
    })
    assert.deepEqual(resolveRoute('/dsh-gpu-dashboard/api/config'), { kind: 'config' })
    for (const p of [
      '/dsh-gpu-dashboard',
      '/dsh-gpu-dashboard/api',
      '/dsh-gpu-dashboard/api/',
      '/dsh-gpu-dashboard/api/metrics',
      '/dsh-gpu-dashboard/api/status/',
      '/dsh-gpu-dashboard/api/status/../../x',
      '/dsh-gpu-dashboard/api/%2e%2e/healthz',
      '/dsh-gpu-dashboard/api/http://evil.com/',
      '/dsh-gpu-dashboard/api//status',
      '/dsh-gpu-dashboard/api/STATUS',
    ]) {
      const r = resolveRoute(p)
      // URL parsing may normalise dot segments; whatever it becomes must not be a proxy to an unknown path
      if (r.kind === 'proxy') assert.ok(['/api/dsh-gpu-dashboard/status', '/api/dsh-gpu-dashboard/history'].includes(r.upstreamPath.split('?')[0]), p)
      else assert.equal(r.kind, 'not-found', p)
    }
    assert.equal(resolveRoute('/dsh-gpu-dashboard/api/%2e%2e/healthz').kind, 'not-found')
  })
  test('since is sanitised to a number', () => {
    assert.equal(sanitizeSince('12.5'), '12.5')
    assert.equal(sanitizeSince('0'), '0')
    for (const v of [null, '', 'abc', '-1', 'NaN', 'Infinity', '1e400', '1;rm', '1&token=x', '9'.repeat(40)]) {
      assert.equal(sanitizeSince(v), null, String(v))
    }
    assert.equal(resolveRoute('/dsh-gpu-dashboard/api/history?since=1%26x%3D1').upstreamPath, '/api/dsh-gpu-dashboard/history')
  })
})

// ------------------------------------------------------------------ handler against a fake sidecar

function listen(handler) {
  return new Promise((resolve) => {
    const server = http.createServer(handler)
    server.listen(0, '127.0.0.1', () => resolve(server))
  })
}

function request(port, path, { method = 'GET', host, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path, method, headers: { Host: host ?? `127.0.0.1:${port}`, ...headers }, agent: false },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let json = null
          try {
            json = text ? JSON.parse(text) : null
          } catch {
            json = null
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json })
        })
      },
    )
    req.on('error', reject)
    req.end()
  })
}

describe('proxy handler', () => {
  let sidecar
  let sidecarPort
  const seen = []
  let proxy
  let proxyPort
  let handler

  before(async () => {
    sidecar = await listen((req, res) => {
      seen.push({ method: req.method, url: req.url, auth: req.headers.authorization || null, host: req.headers.host })
      if (req.url.startsWith('/api/dsh-gpu-dashboard/status')) {
        res.writeHead(200, { 'Content-Type': 'application/json' })
        return res.end(req.method === 'HEAD' ? undefined : JSON.stringify({ schema: 2, status: 'GPU' }))
      }
      if (req.url.startsWith('/api/dsh-gpu-dashboard/history')) {
        res.writeHead(200, { 'Content-Type': 'application/json' })
        return res.end(JSON.stringify({ schema: 2, samples: [], events: [], echo: req.url }))
      }
      res.writeHead(404, { 'Content-Type': 'text/html' })
      res.end('<h1>nope</h1>')
    })
    sidecarPort = sidecar.address().port
    const { config, warnings } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${sidecarPort}`, token: 's3cret', timeoutMs: 500 })
    handler = createHandler(config, quiet, warnings)
    proxy = await listen(handler)
    proxyPort = proxy.address().port
  })
  after(() => {
    handler.close()
    proxy.close()
    sidecar.close()
  })

  test('forwards status with the bearer token', async () => {
    const r = await request(proxyPort, '/dsh-gpu-dashboard/api/status')
    assert.equal(r.status, 200)
    assert.deepEqual(r.json, { schema: 2, status: 'GPU' })
    assert.match(r.headers['content-type'], /application\/json/)
    assert.equal(r.headers['cache-control'], 'no-store')
    const last = seen[seen.length - 1]
    assert.equal(last.url, '/api/dsh-gpu-dashboard/status')
    assert.equal(last.auth, 'Bearer s3cret')
    // The sidecar answers only a Host that names its loopback address (its DNS-rebinding guard).
    assert.equal(last.host, `127.0.0.1:${sidecarPort}`)
  })
  test('HEAD is forwarded as HEAD', async () => {
    const r = await request(proxyPort, '/dsh-gpu-dashboard/api/status', { method: 'HEAD' })
    assert.equal(r.status, 200)
    assert.equal(r.text, '')
    assert.equal(seen[seen.length - 1].method, 'HEAD')
  })
  test('history forwards a sanitised since', async () => {
    let r = await request(proxyPort, '/dsh-gpu-dashboard/api/history?since=17.5&url=http://evil.com')
    assert.equal(r.json.echo, '/api/dsh-gpu-dashboard/history?since=17.5')
    r = await request(proxyPort, '/dsh-gpu-dashboard/api/history?since=../../etc/passwd')
    assert.equal(r.json.echo, '/api/dsh-gpu-dashboard/history')
  })
  test('refuses foreign Host, foreign Origin, other methods and unknown paths', async () => {
    const before = seen.length
    let r = await request(proxyPort, '/dsh-gpu-dashboard/api/status', { host: 'evil.example' })
    assert.equal(r.status, 403)
    r = await request(proxyPort, '/dsh-gpu-dashboard/api/status', { host: '127.0.0.1.evil.example:80' })
    assert.equal(r.status, 403)
    r = await request(proxyPort, '/dsh-gpu-dashboard/api/status', { headers: { Origin: 'https://evil.example' } })
    assert.equal(r.status, 403)
    r = await request(proxyPort, '/dsh-gpu-dashboard/api/status', { method: 'POST' })
    assert.equal(r.status, 405)
    assert.equal(r.headers.allow, 'GET, HEAD')
    for (const p of ['/dsh-gpu-dashboard/api/healthz', '/dsh-gpu-dashboard/api/../../../healthz', '/dsh-gpu-dashboard/api/%2e%2e/%2e%2e/metrics', '/dsh-gpu-dashboard/api/status/x']) {
      r = await request(proxyPort, p)
      assert.equal(r.status, 404, p)
      assert.equal(r.json.error, 'not-found')
    }
    assert.equal(seen.length, before, 'nothing refused may reach the sidecar')
  })
  test('config route hides the token', async () => {
    const r = await request(proxyPort, '/dsh-gpu-dashboard/api/config')
    assert.equal(r.status, 200)
    assert.equal(r.json.sidecarUrl, `http://127.0.0.1:${sidecarPort}`)
    assert.equal(r.json.tokenSet, true)
    assert.ok(!r.text.includes('s3cret'))
  })
  test('unreachable sidecar answers 502 JSON with a hint', async () => {
    const dead = await listen(() => {})
    const deadPort = dead.address().port
    await new Promise((r) => dead.close(r))
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${deadPort}` })
    const h = createHandler(config, quiet)
    const s = await listen(h)
    try {
      const r = await request(s.address().port, '/dsh-gpu-dashboard/api/status')
      assert.equal(r.status, 502)
      assert.equal(r.json.error, 'sidecar-unreachable')
      assert.equal(r.json.url, `http://127.0.0.1:${deadPort}`)
      assert.match(r.json.hint, /dsh-sidecar --pid/)
      assert.match(r.json.hint, /dsh-sidecar run -- python train\.py/)
    } finally {
      h.close()
      s.close()
    }
  })
  test('a hanging sidecar times out into 502', async () => {
    const hang = await listen(() => {}) // accepts, never answers
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${hang.address().port}`, timeoutMs: 200 })
    const h = createHandler(config, quiet)
    const s = await listen(h)
    try {
      const t0 = Date.now()
      const r = await request(s.address().port, '/dsh-gpu-dashboard/api/status')
      assert.equal(r.status, 502)
      assert.match(r.json.detail, /200 ms/)
      assert.ok(Date.now() - t0 < 3000)
    } finally {
      h.close()
      s.close()
      hang.closeAllConnections()
      hang.close()
    }
  })
  test('an answer over the size cap is refused with 502, declared or streamed', async () => {
    const big = Buffer.alloc(MAX_BODY_BYTES + 1, 0x20)
    const up = await listen((req, res) => {
      if (req.url.includes('history')) {
        res.writeHead(200, { 'Content-Type': 'application/json' }) // chunked: no length declared
        res.write(big.subarray(0, MAX_BODY_BYTES))
        return res.end(' ')
      }
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': big.length })
      res.end(big)
    })
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${up.address().port}` })
    const h = createHandler(config, quiet)
    const s = await listen(h)
    try {
      const r = await request(s.address().port, '/dsh-gpu-dashboard/api/status')
      assert.equal(r.status, 502)
      assert.equal(r.json.error, 'sidecar-response-too-large')
      // Streamed: the headers are gone already, so the connection is cut before the cap is passed.
      const received = await new Promise((resolve) => {
        let bytes = 0
        const req = http.get({ host: '127.0.0.1', port: s.address().port, path: '/dsh-gpu-dashboard/api/history', agent: false }, (res) => {
          res.on('data', (c) => (bytes += c.length))
          res.on('error', () => {})
          res.on('close', () => resolve({ bytes, complete: res.complete }))
        })
        req.on('error', () => resolve({ bytes, complete: false }))
      })
      assert.equal(received.complete, false)
      assert.ok(received.bytes <= MAX_BODY_BYTES, received.bytes)
    } finally {
      h.close()
      s.close()
      up.close()
    }
  })
  test('a non-JSON answer is never passed through', async () => {
    const { config } = normalizeConfig({ sidecarUrl: `http://127.0.0.1:${sidecarPort}/elsewhere` })
    const h = createHandler(config, quiet)
    const s = await listen(h)
    try {
      const r = await request(s.address().port, '/dsh-gpu-dashboard/api/status')
      assert.equal(r.status, 502)
      assert.equal(r.json.error, 'sidecar-bad-response')
      assert.ok(!r.text.includes('<h1>'))
    } finally {
      h.close()
      s.close()
    }
  })
})

describe('apply', () => {
  test('never throws, warns about bad config, registers one prefix route', () => {
    const warnings = []
    const routes = []
    const ctx = {
      logger: () => ({ info() {}, warn: (m) => warnings.push(m), error: (m) => warnings.push(m) }),
      effect: (fn) => fn(),
      webServer: { register: (r) => (routes.push(r), () => {}) },
    }
    apply(ctx, { sidecarUrl: 'http://example.com:1', timeoutMs: -5, autostart: false })
    assert.equal(routes.length, 1)
    assert.equal(routes[0].kind, 'prefix')
    assert.equal(routes[0].path, '/dsh-gpu-dashboard')
    assert.equal(warnings.length, 2)
    // a webServer that throws (duplicate path) and a ctx without anything must not throw either
    apply({ ...ctx, webServer: { register: () => { throw new Error('duplicate') } } }, { autostart: false })
    apply({}, {})
    apply(undefined, undefined)
  })
})

describe('a sidecar that refuses the plugin (401/403)', () => {
  test('the answer names the sidecar URL, so the card can say which sidecar wants a token', async () => {
    const sidecar = await listen((req, res) => {
      res.writeHead(401, { 'Content-Type': 'application/json' })
      res.end(JSON.stringify({ error: 'missing or wrong token', status: 401 }))
    })
    const url = `http://127.0.0.1:${sidecar.address().port}`
    const { config } = normalizeConfig({ sidecarUrl: url, timeoutMs: 1000, autostart: false })
    const handler = createHandler(config, quiet)
    const proxy = await listen(handler)
    try {
      const r = await request(proxy.address().port, '/dsh-gpu-dashboard/api/status')
      assert.equal(r.status, 401)
      assert.equal(r.json.error, 'sidecar-auth')
      assert.equal(r.json.url, url)
      assert.match(r.json.detail, /wants a token/)
    } finally {
      handler.close()
      proxy.close()
      sidecar.close()
    }
  })
})
