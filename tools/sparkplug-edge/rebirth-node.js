// A Sparkplug B edge node on Eclipse Tahu's JavaScript client (npm sparkplug-client) that keeps
// sending alias-only DATA and answers rebirth requests, for the host role's interop test
// (tests/interop/test_sparkplug_edge_nodes.py).
//
//   node rebirth-node.js PORT [--host 127.0.0.1] [--group G] [--node N] [--count C] [--every MS]
//
// On connecting it publishes an NBIRTH (metrics `temp` Double alias 1, `count` Int32 alias 2, and
// `Node Control/Rebirth` Boolean false, as Sparkplug 3.0 asks of every NBIRTH), then an NDATA
// every MS milliseconds (default 100) whose metrics carry aliases only, C of them (default 100),
// then stops (NDEATH, DISCONNECT). An NCMD with `Node Control/Rebirth` true makes it publish its
// NBIRTH again (the client restarts seq at 0) before the next DATA. Each line of stdout is one
// event as JSON: {"event": "nbirth"|"rebirth-request"|"done", ...}.
'use strict'

const sparkplug = require('sparkplug-client')

function option (args, name, fallback) {
  const at = args.indexOf(name)
  return at < 0 || at + 1 >= args.length ? fallback : args[at + 1]
}

function say (event) {
  process.stdout.write(JSON.stringify(event) + '\n')
}

function main () {
  const args = process.argv.slice(2)
  const port = Number(args[0])
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    console.error('usage: node rebirth-node.js PORT [--host H] [--group G] [--node N] [--count C] [--every MS]')
    process.exit(2)
  }
  const host = option(args, '--host', '127.0.0.1')
  const groupId = option(args, '--group', 'interop')
  const edgeNode = option(args, '--node', 'rebirth-js')
  const count = Number(option(args, '--count', '100'))
  const every = Number(option(args, '--every', '100'))
  const client = sparkplug.newClient({
    serverUrl: `tcp://${host}:${port}`,
    username: '',
    password: '',
    groupId,
    edgeNode,
    clientId: `${edgeNode}-${process.pid}`,
    publishDeath: true,
    version: 'spBv1.0'
  })
  let sent = 0
  let timer = null

  function nbirth () {
    client.publishNodeBirth({
      timestamp: Date.now(),
      metrics: [
        { name: 'temp', alias: 1, type: 'Double', value: 20.5 },
        { name: 'count', alias: 2, type: 'Int32', value: 0 },
        { name: 'Node Control/Rebirth', alias: 3, type: 'Boolean', value: false }
      ]
    })
    say({ event: 'nbirth', after_data: sent })
  }

  client.on('error', (error) => {
    console.error(`rebirth-node: ${error.message}`)
    process.exit(1)
  })
  client.on('birth', () => {
    if (timer !== null) return
    nbirth()
    timer = setInterval(() => {
      if (sent >= count) {
        clearInterval(timer)
        say({ event: 'done', data: sent })
        client.stop()
        return
      }
      sent += 1
      // Alias only: the metric's name is left out, as DATA messages may (Sparkplug 3.0 6.4.7).
      client.publishNodeData({
        timestamp: Date.now(),
        metrics: [
          { alias: 1, type: 'Double', value: sent / 2 },
          { alias: 2, type: 'Int32', value: -sent }
        ]
      })
    }, every)
  })
  client.on('ncmd', (payload) => {
    const rebirth = (payload.metrics || []).some(
      (m) => m.name === 'Node Control/Rebirth' && m.value === true
    )
    say({ event: 'rebirth-request', rebirth, timestamp: Number(payload.timestamp) })
    if (rebirth) nbirth()
  })
  client.on('close', () => {
    process.exitCode = 0
  })
}

main()
