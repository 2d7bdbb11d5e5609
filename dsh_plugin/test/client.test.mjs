// Unit tests of the browser half's pure parts (node --test test/): response classification,
// the shared catalogue (en/zh parity, plugin strings, references to render).
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { classify, clampRefresh } from '../src/client/store.js'
import { CATALOGUE, renderRef, schemaMismatch, summarize, t } from '../../sidecar/static/shared/format.js'

describe('classify', () => {
  const path = '/dsh-gpu-dashboard/api/status'
  test('a status document is ok', () => {
    assert.equal(classify({ httpStatus: 200, json: true, body: { schema: 2, status: 'GPU' } }, path).kind, 'ok')
  })
  test('a document of another schema is an error that names both schemas', () => {
    for (const body of [{ schema: 1, status: 'GPU' }, { schema: 3 }, { status: 'GPU' }]) {
      const c = classify({ httpStatus: 200, json: true, body }, path)
      assert.deepEqual([c.kind, c.code, c.got], ['error', 'schema', body.schema ?? null])
    }
    assert.match(schemaMismatch({ schema: 1 }, 'en'), /schema 1.*schema 2/)
    assert.match(schemaMismatch({ schema: 1 }, 'zh'), /第 1 版.*第 2 版/)
    assert.equal(schemaMismatch({ schema: 2 }, 'en'), null)
  })
  test('502 sidecar-unreachable carries url and hint', () => {
    const c = classify({ httpStatus: 502, json: true, body: { error: 'sidecar-unreachable', url: 'http://127.0.0.1:1', hint: 'h' } }, path)
    assert.deepEqual([c.kind, c.url, c.hint], ['unreachable', 'http://127.0.0.1:1', 'h'])
  })
  test('HTML (DSH page fallback) means the host half is missing', () => {
    const c = classify({ httpStatus: 200, json: false, body: null }, path)
    assert.deepEqual([c.kind, c.code], ['error', 'host-missing'])
  })
  test('sidecar 503 before its first poll is still loading; 401 is an auth problem', () => {
    assert.equal(classify({ httpStatus: 503, json: true, body: { error: 'no poll has completed yet' } }, path).kind, 'loading')
    const c = classify({ httpStatus: 401, json: true, body: { error: 'missing or wrong token' } }, path)
    assert.deepEqual([c.kind, c.code], ['error', 'auth'])
    const named = classify({ httpStatus: 401, json: true, body: { error: 'sidecar-auth', url: 'http://127.0.0.1:8765' } }, path)
    assert.deepEqual([named.code, named.url], ['auth', 'http://127.0.0.1:8765'])
  })
  test('a JSON error body at 200 is not ok', () => {
    assert.equal(classify({ httpStatus: 200, json: true, body: { error: 'x' } }, path).kind, 'error')
    assert.equal(classify({ httpStatus: 200, json: true, body: [] }, path).kind, 'error')
  })
})

test('clampRefresh', () => {
  assert.equal(clampRefresh(0.1), 0.5)
  assert.equal(clampRefresh(1000), 60)
  assert.equal(clampRefresh('abc'), 2)
  assert.equal(clampRefresh('5'), 5)
})

describe('catalogue', () => {
  const placeholders = (s) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort()
  test('en and zh have the same keys and placeholders', () => {
    assert.deepEqual(Object.keys(CATALOGUE.zh).sort(), Object.keys(CATALOGUE.en).sort())
    for (const [key, s] of Object.entries(CATALOGUE.en)) assert.deepEqual(placeholders(CATALOGUE.zh[key]), placeholders(s), key)
  })
  test('plugin strings and page strings, with variables, falling back to en', () => {
    assert.equal(t('en', 'chip.unreachable'), 'no sidecar')
    assert.notEqual(t('zh', 'status.GPU'), 'status.GPU')
    assert.equal(t('en', 'settings.urlDiffers', { url: 'U' }), 'Not applied yet: the host still uses U.')
    assert.equal(t('fr', 'plugin.name'), 'GPU dashboard')
  })
  test('references render in the language asked, nested ones too, and never throw', () => {
    const reason = { id: 'reason.cpu.not-moved', params: {} }
    const ref = { id: 'message.exited', params: { pid: 7, message: { id: 'message.cpu', params: { model: 'Net', reason } } } }
    assert.equal(renderRef(ref, 'en'), 'Process 7 has exited. Last known: Model Net runs on the CPU: a GPU is available but the model was not moved to it.')
    assert.equal(renderRef(ref, 'zh'), '进程 7 已退出。最后状态：模型 Net 运行在 CPU 上：GPU 可用，但模型没有被移到 GPU 上。')
    assert.equal(renderRef({ id: 'no.such' }, 'zh'), 'no.such')
    assert.equal(renderRef({ id: 'message.exited', params: { pid: '{message}', message: { x: 1 } } }, 'en'), 'Process {message} has exited. Last known: {message}')
    assert.equal(renderRef(null, 'en'), null)
    assert.equal(renderRef({ id: '__proto__', params: { toString: 1 } }, 'en'), '__proto__')
  })
  test('a document renders from its refs in the language asked, else its English strings', () => {
    const doc = {
      status: 'CPU',
      message: 'Model Net runs on the CPU: no accelerator is in use.',
      message_ref: { id: 'message.cpu', params: { model: 'Net', reason: { id: 'reason.cpu.no-accelerator', params: {} } } },
      warnings: [
        { code: 'no-probe', severity: 'warning', message: 'M', hint: 'H', message_ref: { id: 'warning.no-probe', params: {} }, hint_ref: { id: 'hint.no-probe', params: {} } },
        { code: 'x', severity: 'info', message: 'English only', hint: null },
      ],
    }
    const zh = summarize(doc, 'zh')
    assert.equal(zh.message, '模型 Net 运行在 CPU 上：未使用任何加速器。')
    assert.equal(zh.warnings[0].message, CATALOGUE.zh['warning.no-probe'])
    assert.equal(zh.warnings[0].hint, CATALOGUE.zh['hint.no-probe'])
    assert.deepEqual([zh.warnings[1].message, zh.warnings[1].hint], ['English only', ''])
    assert.equal(summarize(doc, 'en').message, doc.message)
  })
})
