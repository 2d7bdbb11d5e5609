// host/peer.js: addresses as the kernel prints them, and a real loopback connection's owner.
import assert from 'node:assert/strict'
import net from 'node:net'
import { test } from 'node:test'

import { addressBytes, connectionServerUid, kernelHex, peerRefusal, serverRefusal, socketOwnerUid } from '../host/peer.js'

test('addresses parse as inet_pton does', () => {
  assert.deepEqual([...addressBytes('127.0.0.1')], [127, 0, 0, 1])
  assert.deepEqual([...addressBytes('::1')], [...Array(15).fill(0), 1])
  assert.deepEqual([...addressBytes('::ffff:127.0.0.1')], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 127, 0, 0, 1])
  assert.deepEqual([...addressBytes('fe80::1%eth0')].slice(0, 2), [0xfe, 0x80])
  for (const bad of ['', '1.2.3', '256.0.0.1', ':::1', '1::2::3', 'x', null, '1:2:3:4:5:6:7:8:9']) {
    assert.equal(addressBytes(bad), null, String(bad))
  }
})

test('kernel hex is each 32-bit word in host order (x86: 127.0.0.1 is 0100007F)', () => {
  assert.equal(kernelHex(addressBytes('127.0.0.1')), '0100007F')
  assert.equal(kernelHex(addressBytes('::1')), '000000000000000000000000' + '01000000')
})

test('a live loopback connection is owned by this process user; TIME_WAIT rows are not trusted', async () => {
  if (process.platform !== 'linux') return
  const server = net.createServer(() => {})
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address()
  const client = net.connect(port, '127.0.0.1')
  await new Promise((r) => client.on('connect', r))
  try {
    assert.equal(socketOwnerUid('127.0.0.1', client.localPort, port), process.geteuid())
    assert.equal(socketOwnerUid('::ffff:127.0.0.1', client.localPort, port), process.geteuid())
    assert.equal(socketOwnerUid('127.0.0.1', client.localPort, port + 1 > 65535 ? 1 : port + 1), null)
    const sock = { remoteAddress: '127.0.0.1', remotePort: client.localPort, localPort: port }
    assert.equal(peerRefusal(sock), null)
    assert.match(peerRefusal(sock, { ownUid: 4242, readTable: () => null }), /cannot tell which user/)
    const row = (st, uid) =>
      `  sl  local_address rem_address   st\n   0: 0100007F:${client.localPort.toString(16).toUpperCase().padStart(4, '0')} ` +
      `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')} ${st} 0:0 0:0 0 ${uid} 0 1`
    assert.equal(socketOwnerUid('127.0.0.1', client.localPort, port, () => row('01', 1234)), 1234)
    assert.equal(socketOwnerUid('127.0.0.1', client.localPort, port, () => row('06', 0)), null)
    assert.match(peerRefusal(sock, { ownUid: 4242, readTable: () => row('01', 1234) }), /uid 1234.*uid 4242/)
  } finally {
    client.destroy()
    server.close()
  }
})

test('the server end of a real connection names its user; another user or an untold loopback owner is refused', async () => {
  if (process.platform !== 'linux') return
  const server = net.createServer(() => {})
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  const client = net.connect(server.address().port, '127.0.0.1')
  await new Promise((r) => client.on('connect', r))
  try {
    assert.equal(connectionServerUid(client), process.geteuid())
    assert.equal(serverRefusal(client), null)
    const hex = (p) => p.toString(16).toUpperCase().padStart(4, '0')
    const row = (local, remote, uid) => `   0: 0100007F:${hex(local)} 0100007F:${hex(remote)} 01 0:0 0:0 0 ${uid} 0 1`
    const table = (...rows) => () => ['  sl  local_address rem_address   st', ...rows].join('\n')
    // the listener's row and another client's connection do not count: only this connection's server end
    const theirs = table(row(client.remotePort, client.localPort + 1, 0), row(client.remotePort, client.localPort, 65534))
    assert.equal(connectionServerUid(client, theirs), 65534)
    assert.match(serverRefusal(client, { serverUid: () => 65534 }).message, /another user \(uid 65534\).*no token/)
    assert.equal(serverRefusal(client, { serverUid: () => 0, ownUid: 4242 }), null) // root's node-wide sidecar
    assert.match(serverRefusal(client, { serverUid: () => null }).message, /cannot be told/) // loopback, no row
    const remote = { remoteAddress: '10.1.2.3', remotePort: 8765, localAddress: '10.1.2.4', localPort: 40000 }
    assert.equal(serverRefusal(remote, { serverUid: () => null }), null) // another host: no table of ours lists it
  } finally {
    client.destroy()
    server.close()
  }
})
