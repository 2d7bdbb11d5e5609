#!/usr/bin/env node
// Renders the GPU view's process table and GPU cards (src/client/processes.jsx, gpus.jsx) for the status
// documents read from stdin, {lang, docs: {name: doc}}, without React (test/jsx-shim.mjs), and prints
// {name: {processes: html, gpus: html}} as JSON. tests/browser/test_same_cells.py reads these in
// Chromium beside the standalone page's, and compares the cells.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { render } from './jsx-shim.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, '..')
const entry = "export { ProcessTable } from './src/client/processes.jsx'\nexport { GpuCards } from './src/client/gpus.jsx'\n"
const out = await build({
  absWorkingDir: root,
  stdin: { contents: entry, resolveDir: root, loader: 'js' },
  bundle: true,
  write: false,
  format: 'esm',
  platform: 'neutral',
  jsx: 'automatic',
  loader: { '.js': 'jsx' },
  alias: { 'react/jsx-runtime': join(here, 'jsx-shim.mjs'), react: join(here, 'react-stub.mjs') },
  logLevel: 'silent',
})
const dir = mkdtempSync(join(tmpdir(), 'dgd-views-'))
try {
  const file = join(dir, 'views.mjs')
  writeFileSync(file, out.outputFiles[0].text)
  const mod = await import(pathToFileURL(file).href)
  const { lang, docs } = JSON.parse(readFileSync(0, 'utf8'))
  const result = {}
  for (const [name, doc] of Object.entries(docs)) {
    result[name] = { processes: render(mod.ProcessTable({ doc, lang })), gpus: render(mod.GpuCards({ doc, lang })) }
  }
  process.stdout.write(JSON.stringify(result))
} finally {
  rmSync(dir, { recursive: true, force: true })
}
