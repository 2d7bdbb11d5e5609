// Unit tests of the browser half's pure parts (node --test test/): response classification,
// event merging, the plugin's own strings (en/zh parity, fallback to the shared catalogue).
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { classify, clampRefresh, mergeEvents } from '../src/client/store.js'
import { schemaMismatch, t } from '../../sidecar/static/format.js'
import { LOCAL_STRINGS, tr } from '../src/client/strings.js'

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
  })
  test('a JSON error body at 200 is not ok', () => {
    assert.equal(classify({ httpStatus: 200, json: true, body: { error: 'x' } }, path).kind, 'error')
    assert.equal(classify({ httpStatus: 200, json: true, body: [] }, path).kind, 'error')
  })
})

test('mergeEvents dedupes, sorts and caps', () => {
  const a = [{ time: 2, name: 'b', pid: 1 }]
  const merged = mergeEvents(a, [{ time: 1, name: 'a', pid: 1 }, { time: 2, name: 'b', pid: 1 }, null, 'x'])
  assert.deepEqual(merged.map((e) => e.name), ['a', 'b'])
  const many = Array.from({ length: 600 }, (_, i) => ({ time: i, name: 'e', pid: 1 }))
  assert.equal(mergeEvents([], many).length, 500)
  assert.deepEqual(mergeEvents(undefined, undefined), [])
})

test('clampRefresh', () => {
  assert.equal(clampRefresh(0.1), 0.5)
  assert.equal(clampRefresh(1000), 60)
  assert.equal(clampRefresh('abc'), 2)
  assert.equal(clampRefresh('5'), 5)
})

describe('strings', () => {
  test('en and zh have the same keys', () => {
    assert.deepEqual(Object.keys(LOCAL_STRINGS.zh).sort(), Object.keys(LOCAL_STRINGS.en).sort())
  })
  test('plugin strings first, then the shared catalogue, with variables', () => {
    assert.equal(tr('en', 'chip.unreachable'), 'no sidecar')
    assert.equal(tr('zh', 'status.GPU'), t('zh', 'status.GPU'))
    assert.notEqual(tr('zh', 'status.GPU'), 'status.GPU')
    assert.equal(tr('en', 'settings.urlDiffers', { url: 'U' }), 'Not applied yet: the host still uses U.')
    assert.equal(tr('fr', 'plugin.name'), 'GPU dashboard')
  })
})
