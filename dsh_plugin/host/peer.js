// Which local user is at the other end of a request to the plugin's routes.
//
// DSH 0.1.0-rc.8 has no login: any user of the machine can connect to its loopback port, and the
// proxy would hand them everything the sidecar shows (every job of a root sidecar, with its
// commands and working directories). So the routes answer only connections whose client socket
// belongs to DSH's own user or root, as the kernel lists them in /proc/net/tcp{,6} (readable by
// every user): the row whose local address is the request's remote address and port, and whose
// remote port is DSH's. A live socket keeps the uid of the process that made it; a TIME_WAIT row
// (uid 0 whoever made it) is never trusted. The same rule as the sidecar's (sidecar/serve/peers.py).
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'

const TABLES = { 4: '/proc/net/tcp', 6: '/proc/net/tcp6' }
const MAX_TABLE_BYTES = 64 * 1024 * 1024 // a bound on each read; a larger table is refused (safe)
const TCP_TIME_WAIT = '06'
const ROOT_UID = 0

/** The 16 (IPv6) or 4 (IPv4) bytes of an address, or null. */
export function addressBytes(address) {
  if (typeof address !== 'string') return null
  const text = address.split('%')[0]
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text)
  if (v4) {
    const parts = v4.slice(1).map(Number)
    return parts.every((n) => n <= 255) ? Buffer.from(parts) : null
  }
  if (!text.includes(':')) return null
  let head = text
  let tail4 = null
  const m = /^(.*:)(\d{1,3}(?:\.\d{1,3}){3})$/.exec(text) // ::ffff:127.0.0.1
  if (m) {
    tail4 = addressBytes(m[2])
    if (!tail4) return null
    head = m[1].endsWith('::') ? m[1] : m[1].slice(0, -1)
  }
  const halves = head.split('::')
  if (halves.length > 2) return null
  const words = (s) => (s === '' ? [] : s.split(':'))
  const left = words(halves[0])
  const right = halves.length === 2 ? words(halves[1]) : []
  const want = tail4 ? 6 : 8
  const missing = want - left.length - right.length
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return null
  const all = [...left, ...Array(halves.length === 2 ? missing : 0).fill('0'), ...right]
  if (!all.every((w) => /^[0-9a-fA-F]{1,4}$/.test(w))) return null
  const out = Buffer.alloc(16)
  all.forEach((w, i) => out.writeUInt16BE(parseInt(w, 16), i * 2))
  if (tail4) tail4.copy(out, 12)
  return out
}

/** An address as /proc/net/tcp{,6} prints it: each 32-bit word in the host's byte order, %08X. */
export function kernelHex(bytes) {
  const le = os.endianness() === 'LE'
  let s = ''
  for (let i = 0; i < bytes.length; i += 4) {
    const w = le ? bytes.readUInt32LE(i) : bytes.readUInt32BE(i)
    s += w.toString(16).toUpperCase().padStart(8, '0')
  }
  return s
}

const hexPort = (port) => port.toString(16).toUpperCase().padStart(4, '0')

function readBounded(path) {
  let fd = null
  try {
    fd = fs.openSync(path, 'r')
    const chunks = []
    let total = 0
    const buf = Buffer.alloc(1 << 16)
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, null)
      if (n <= 0) break
      total += n
      if (total > MAX_TABLE_BYTES) return null
      chunks.push(Buffer.from(buf.subarray(0, n)))
    }
    return Buffer.concat(chunks).toString('latin1')
  } catch {
    return null
  } finally {
    if (fd !== null) fs.closeSync(fd)
  }
}

/** [family, ADDR:PORT as the tables print it] for each form an address takes there (an IPv4 peer of a dual-stack socket is ::ffff:a.b.c.d in tcp6). */
function tableForms(address, port) {
  const bytes = addressBytes(address)
  if (!bytes || !Number.isInteger(port)) return []
  const suffix = `:${hexPort(port)}`
  const forms = [[bytes.length === 4 ? 4 : 6, kernelHex(bytes) + suffix]]
  if (bytes.length === 4) {
    const mapped = Buffer.alloc(16)
    mapped.writeUInt16BE(0xffff, 10)
    bytes.copy(mapped, 12)
    forms.push([6, kernelHex(mapped) + suffix])
  } else if (bytes.subarray(0, 12).equals(Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]))) {
    forms.push([4, kernelHex(bytes.subarray(12)) + suffix]) // Node shows an IPv4 peer as ::ffff:a.b.c.d
  }
  return forms
}

/** The uid of the first row whose local end is one of `localForms` and whose remote end is one of `remoteForms` (null: any address at `remotePort`). */
function findRowUid(localForms, remoteForms, remotePort, readTable) {
  for (const family of [4, 6]) {
    const locals = new Set(localForms.filter(([f]) => f === family).map(([, t]) => t))
    if (!locals.size) continue
    const remotes = remoteForms && new Set(remoteForms.filter(([f]) => f === family).map(([, t]) => t))
    const table = readTable(TABLES[family])
    if (table === null) continue
    for (const line of table.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      // sl local rem st tx:rx tr:when retrnsmt uid ...
      if (f.length < 8 || !locals.has(f[1])) continue
      if (remotes ? !remotes.has(f[2]) : !f[2].endsWith(`:${hexPort(remotePort)}`)) continue
      if (f[3] === TCP_TIME_WAIT) return null
      const uid = Number(f[7])
      return Number.isInteger(uid) ? uid : null
    }
  }
  return null
}

/** The uid owning the client socket (address, port) connected to our localPort; null when unknown. */
export function socketOwnerUid(address, port, localPort, readTable = readBounded) {
  if (!Number.isInteger(localPort)) return null
  const forms = tableForms(address, port)
  return forms.length ? findRowUid(forms, null, localPort, readTable) : null
}

/**
 * Who serves the connected socket `socket` (ours, a client): the row whose local end is its peer
 * and whose remote end is its own address. An accepted connection's row carries its listener's uid
 * from the SYN on, so no later bind of the port by anyone changes it. null: no such row here (the
 * server is another host) or the tables cannot be read.
 */
export function connectionServerUid(socket, readTable = readBounded) {
  const server = tableForms(socket && socket.remoteAddress, socket && socket.remotePort)
  const client = tableForms(socket && socket.localAddress, socket && socket.localPort)
  return server.length && client.length ? findRowUid(server, client, null, readTable) : null
}

const isLoopbackPeer = (address) => {
  const bytes = addressBytes(address)
  if (!bytes) return false
  const v4 = bytes.length === 4 ? bytes : bytes.subarray(0, 12).equals(Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])) ? bytes.subarray(12) : null
  if (v4) return v4[0] === 127
  return bytes.equals(Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
}

/**
 * Why nothing may be sent over the connected socket `socket` (another local user serves it, or a
 * loopback server whose owner cannot be told), or null to go ahead: ours, root's, or another host's.
 * `serverUid` replaces the table lookup in tests. Linux only: elsewhere nothing is refused here.
 */
export function serverRefusal(socket, deps = {}) {
  const platform = deps.platform || process.platform
  if (platform !== 'linux') return null
  const ownUid = typeof deps.ownUid === 'number' ? deps.ownUid : process.geteuid()
  const uid = (deps.serverUid || connectionServerUid)(socket)
  if (uid === null && !isLoopbackPeer(socket.remoteAddress)) return null
  if (uid !== null && (uid === ownUid || uid === ROOT_UID)) return null
  const port = socket.remotePort
  const who = uid === null ? 'its user cannot be told' : `it is served by another user (uid ${uid})`
  return { uid, message: `refused: port ${port} ${who}, not by you or root; no request and no token was sent there` }
}

/**
 * Why this request's user may not use the plugin's routes, or null when they may (DSH's own user
 * or root). Linux only: elsewhere there is no table to read and nothing is refused here.
 */
export function peerRefusal(socket, deps = {}) {
  const platform = deps.platform || process.platform
  if (platform !== 'linux') return null
  const ownUid = typeof deps.ownUid === 'number' ? deps.ownUid : process.geteuid()
  const uid = socketOwnerUid(socket && socket.remoteAddress, socket && socket.remotePort, socket && socket.localPort, deps.readTable)
  if (uid !== null && (uid === ownUid || uid === ROOT_UID)) return null
  const who = uid === null ? 'cannot tell which user this connection comes from' : `this connection comes from uid ${uid}`
  return (
    `${who}: the GPU dashboard in this DSH serves only DSH's own user (uid ${ownUid}) and root, ` +
    'because DSH has no login and any user of this machine can reach its port. ' +
    'Start your own DSH or `dsh-sidecar` to see your jobs.'
  )
}

/**
 * An http.Agent that hands a connection to a request only once `serverRefusal` found its server
 * ours, root's or another host's: the request, and its token, are written after that check, on the
 * connection it checked. A check of the port's listener before connecting would race another user
 * who binds the port for a moment. A refused connection fails the request with the reason (and
 * `foreignUid`). `peerDeps` (platform, ownUid, serverUid) are for tests.
 */
export class ProvedAgent extends http.Agent {
  constructor(options = {}, peerDeps = {}) {
    super(options)
    this.peerDeps = peerDeps
  }

  createConnection(options, callback) {
    const socket = net.createConnection(options)
    let settled = false
    const settle = (err, s) => {
      if (settled) return
      settled = true
      callback(err, s)
    }
    socket.once('error', (err) => settle(err))
    socket.once('connect', () => {
      const refusal = serverRefusal(socket, this.peerDeps)
      if (!refusal) return settle(null, socket)
      socket.destroy()
      return settle(Object.assign(new Error(refusal.message), { foreignUid: refusal.uid }))
    })
    return undefined
  }
}
