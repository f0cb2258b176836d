// An aedes MQTT broker on 127.0.0.1 for the connector's interop tests
// (devtools/interop_brokers.py).
//
//   node server.js PORT [--trace]
//
// Every client and topic is allowed; sessions and queued messages live in aedes's default
// in-memory persistence (the tests restart the client, never the broker). Prints
// "aedes-broker ready on 127.0.0.1:PORT" once the listener accepts connections; SIGTERM or
// SIGINT stops it. With --trace every CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL and PUBCOMP
// sent or received is logged with its packet id, QoS and DUP flag (a CONNACK with its
// session-present flag), so a test's log shows what the broker did on the wire.

import net from 'node:net'
import { Aedes } from 'aedes'
import mqttPacket from 'mqtt-packet'

const HOST = '127.0.0.1'
const TRACED = new Set(['connack', 'publish', 'puback', 'pubrec', 'pubrel', 'pubcomp'])

function log (...parts) {
  console.log(new Date().toISOString(), ...parts)
}

function usage () {
  console.error('usage: node server.js PORT [--trace]')
  process.exit(2)
}

const args = process.argv.slice(2)
const trace = args.includes('--trace')
const positional = args.filter((arg) => !arg.startsWith('--'))
if (positional.length !== 1) usage()
const port = Number(positional[0])
if (!Number.isInteger(port) || port < 1 || port > 65535) usage()

function describe (direction, clientId, packet) {
  if (!TRACED.has(packet.cmd)) return
  const parts = [direction, packet.cmd.toUpperCase(), `client=${clientId}`]
  if (packet.cmd === 'connack') {
    parts.push(`session_present=${packet.sessionPresent}`, `rc=${packet.returnCode}`)
  } else {
    parts.push(`id=${packet.messageId}`)
  }
  if (packet.cmd === 'publish') {
    parts.push(`qos=${packet.qos}`, `dup=${packet.dup}`, `topic=${packet.topic}`,
      `payload=${String(packet.payload)}`)
  }
  log(...parts)
}

// Parses what aedes writes to the socket and what it reads from it, for --trace.
function traceConnection (conn, client) {
  const outbound = mqttPacket.parser({ protocolVersion: 4 })
  outbound.on('packet', (packet) => describe('sent', client.id, packet))
  outbound.on('error', (err) => log('trace: cannot parse outbound bytes:', err.message))
  const write = conn.write
  conn.write = function tracedWrite (chunk, encoding, callback) {
    const bytes = typeof chunk === 'string'
      ? Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8')
      : chunk
    outbound.parse(bytes)
    return write.call(this, chunk, encoding, callback)
  }
  // Inbound: aedes's own parser of this connection.
  client._parser.on('packet', (packet) => describe('read', client.id, packet))
}

async function main () {
  const broker = await Aedes.createBroker()
  broker.on('clientError', (client, err) => log('client error', client && client.id, err.message))
  broker.on('connectionError', (client, err) => log('connection error', err.message))
  broker.on('client', (client) => log('client connected', client.id, `clean=${client.clean}`))
  broker.on('clientDisconnect', (client) => log('client disconnected', client.id))
  broker.on('subscribe', (subscriptions, client) => {
    const filters = subscriptions.map((s) => `${s.topic}@${s.qos}`).join(',')
    log('subscribe', client && client.id, filters)
  })

  const server = net.createServer((conn) => {
    const client = broker.handle(conn)
    if (trace) traceConnection(conn, client)
  })
  server.on('error', (err) => {
    log('aedes-broker failed:', err.message)
    process.exit(1)
  })
  server.listen(port, HOST, () => {
    console.log(`aedes-broker ready on ${HOST}:${port} (aedes ${broker.version})`)
  })

  let stopping = false
  function stop (signal) {
    if (stopping) return
    stopping = true
    log('stopping on', signal)
    server.close()
    broker.close(() => process.exit(0))
  }
  process.on('SIGTERM', () => stop('SIGTERM'))
  process.on('SIGINT', () => stop('SIGINT'))
}

main().catch((err) => {
  log('aedes-broker failed:', err && err.stack ? err.stack : err)
  process.exit(1)
})
