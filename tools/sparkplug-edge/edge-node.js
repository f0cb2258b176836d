// A Sparkplug B edge node built on Eclipse Tahu's JavaScript client (npm sparkplug-client, which
// encodes with npm sparkplug-payload), for the connector's interop tests
// (tests/interop/test_sparkplug_edge_nodes.py).
//
//   node edge-node.js PORT [--host 127.0.0.1] [--group G] [--node N] [--device D]
//
// Connects to the broker at HOST:PORT (127.0.0.1 unless told), then publishes, in order:
//   NBIRTH   one metric of each datatype sparkplug-payload encodes, each with an alias (1, 2, ...),
//            plus the bdSeq metric the client adds itself
//   DBIRTH   a few metrics of device D, aliases 101, 102, ...
//   NDATA x2, DDATA x2   metrics that carry an alias and no name
// and then stops with SparkplugClient.stop() and publishDeath: true, which publishes NDEATH
// (bdSeq 0) itself and then sends DISCONNECT: the broker does not publish the Will.
//
// Before stopping it prints one line of JSON to stdout: every message it published, each metric
// with its birth name, alias, datatype and the value handed to the library. Integers beyond 2^53
// are decimal strings, Bytes and File values {"hex": ...}, DateTime milliseconds since the epoch.
//
// What the library does with each datatype (sparkplug-payload 1.0.3, lib/sparkplugbpayload.js
// setValue and encodeMetric; sparkplug-client 3.2.4, index.js):
// - Int8, Int16, Int32, UInt8, UInt16 go in int_value (protobuf uint32); protobufjs writes a
//   negative JavaScript number as `value >>> 0`, so Int8 -1 is sent as 4294967295.
// - Int64, UInt32, UInt64 and DateTime go in long_value (uint64); a negative number is written
//   as its 64-bit two's complement (Int64 -7 as 18446744073709551609). Values beyond 2^53 are
//   passed as Long objects (npm long).
// - Float in float_value, Double in double_value, Boolean in boolean_value; String, Text and
//   UUID in string_value; Bytes and File in bytes_value; DataSet and Template in their messages.
// - encodeMetric always writes the datatype, in DATA messages too, and needs a type for every
//   metric; a metric without a name is sent without one.
// - encodeType knows no array type (22-34): a type such as "Int8Array" becomes 0 (Unknown) and
//   setValue writes no value, so no array metric is sent here.
// - publishNodeBirth appends the bdSeq metric with type UInt64 (value 0 for the first session)
//   and sets seq 0; every later message takes the next seq. NDEATH carries no seq.
'use strict'

const sparkplug = require('sparkplug-client')
const Long = require('long')

const BYTES = Buffer.from([0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff])
const FILE = Buffer.from('line one\nline two\n', 'utf8')

function usage () {
  console.error('usage: node edge-node.js PORT [--host H] [--group G] [--node N] [--device D]')
  process.exit(2)
}

function option (args, name, fallback) {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  if (at + 1 >= args.length) usage()
  return args[at + 1]
}

// A 64-bit value for the library (a Long) and for the report (its decimal string).
function long (text, unsigned) {
  return { library: Long.fromString(text, unsigned), report: text }
}

// The value as the library takes it (data set cells and template members too), and as the
// report says it.
function libraryValue (value) {
  if (value && value.library !== undefined) return value.library
  if (Buffer.isBuffer(value)) return value
  if (Array.isArray(value)) return value.map(libraryValue)
  if (value && typeof value === 'object') {
    const out = {}
    for (const [key, item] of Object.entries(value)) out[key] = libraryValue(item)
    return out
  }
  return value
}

function reportValue (value) {
  if (value && value.library !== undefined) return value.report
  if (Buffer.isBuffer(value)) return { hex: value.toString('hex') }
  if (Array.isArray(value)) return value.map(reportValue)
  if (value && typeof value === 'object') {
    const out = {}
    for (const [key, item] of Object.entries(value)) out[key] = reportValue(item)
    return out
  }
  return value
}

// The DataSet and Template objects as the library's encodeDataSet / encodeTemplate take them.
function dataSet (rows) {
  return {
    numOfColumns: 5,
    columns: ['id', 'total', 'ratio', 'ok', 'label'],
    types: ['Int32', 'Int64', 'Double', 'Boolean', 'String'],
    rows
  }
}

function template (isDefinition, rpm, label, maxRpm) {
  const value = {
    version: 'v1',
    isDefinition,
    metrics: [
      { name: 'rpm', type: 'Int32', value: rpm },
      { name: 'label', type: 'String', value: label }
    ],
    parameters: [{ name: 'maxRpm', type: 'Int32', value: maxRpm }]
  }
  if (!isDefinition) value.templateRef = 'Motor'
  return value
}

// Node metrics: [name, type, birth value, first NDATA value, second NDATA value or undefined].
const NODE_METRICS = [
  ['Int8', 'Int8', -1, -128, 127],
  ['Int16', 'Int16', -2, -32768, 32767],
  ['Int32', 'Int32', -5, -2147483648, 2147483647],
  ['Int64', 'Int64', -7, long('-9223372036854775808', false), long('9223372036854775807', false)],
  ['UInt8', 'UInt8', 200, 255, 0],
  ['UInt16', 'UInt16', 60000, 65535, 0],
  ['UInt32', 'UInt32', 4294967295, 0, 3000000000],
  ['UInt64', 'UInt64', long('18446744073709551615', true), long('9223372036854775808', true), 0],
  ['Float', 'Float', 3.14, -0.5, 1e-3],
  ['Double', 'Double', 2.718281828459045, -1e300, 0.1],
  ['Boolean', 'Boolean', true, false, true],
  ['String', 'String', 'héllo ✓', '', 'second'],
  ['DateTime', 'DateTime', 1700000000123, 0, 4102444800000],
  ['Text', 'Text', 'a longer\ntext', 'text two', undefined],
  ['UUID', 'UUID', '123e4567-e89b-12d3-a456-426614174000', '00000000-0000-0000-0000-000000000000', undefined],
  ['Bytes', 'Bytes', BYTES, Buffer.from([]), Buffer.from([0x42])],
  ['File', 'File', FILE, Buffer.from('other file', 'utf8'), undefined],
  ['DataSet', 'DataSet',
    dataSet([[-1, -7, 0.25, true, 'a'], [2147483647, 42, -1.5, false, 'b']]),
    dataSet([[-2147483648, long('-9223372036854775808', false), 1e300, true, 'ü']]),
    undefined],
  ['_types_/Motor', 'Template', template(true, 0, '', 3000), undefined, undefined],
  ['Motor1', 'Template', template(false, -12, 'left', 1500), template(false, 1200, 'right', 1500), undefined]
]

// Device metrics, the same form; aliases from 101.
const DEVICE_METRICS = [
  ['dev/Int16', 'Int16', -300, -1, 1],
  ['dev/UInt64', 'UInt64', long('18446744073709551615', true), 7, long('12345678901234567890', true)],
  ['dev/Double', 'Double', -0.125, 1.5, undefined],
  ['dev/Boolean', 'Boolean', false, true, false],
  ['dev/String', 'String', 'device ✓', 'x', undefined],
  ['dev/DateTime', 'DateTime', 1, 1700000000999, undefined]
]

const PROPERTIES = {
  engUnit: { type: 'String', value: 'degC' },
  Quality: { type: 'Int32', value: 192 }
}

function birthMetrics (table, firstAlias) {
  return table.map(([name, type, value], i) => {
    const metric = { name, type, alias: firstAlias + i, value: libraryValue(value) }
    if (name === 'Double') metric.properties = PROPERTIES
    if (name === 'File') metric.metadata = { fileName: 'notes.txt' }
    return metric
  })
}

// The metrics of the column-th value (3 or 4) of each row that has one: alias and type, no name.
function dataMetrics (table, firstAlias, column) {
  const out = []
  table.forEach((row, i) => {
    if (row[column] !== undefined) {
      out.push({ alias: firstAlias + i, type: row[1], value: libraryValue(row[column]) })
    }
  })
  return out
}

function reportMetrics (table, firstAlias, column) {
  const out = []
  table.forEach((row, i) => {
    if (row[column] !== undefined) {
      out.push({ name: row[0], alias: firstAlias + i, datatype: row[1], value: reportValue(row[column]) })
    }
  })
  return out
}

function main () {
  const args = process.argv.slice(2)
  const port = Number(args[0])
  if (!Number.isInteger(port) || port <= 0 || port > 65535) usage()
  const host = option(args, '--host', '127.0.0.1')
  const groupId = option(args, '--group', 'interop')
  const edgeNode = option(args, '--node', 'tahu-js')
  const deviceId = option(args, '--device', 'device1')

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
  const report = {
    library: {
      'sparkplug-client': require('sparkplug-client/package.json').version,
      'sparkplug-payload': require('sparkplug-payload/package.json').version
    },
    group_id: groupId,
    edge_node_id: edgeNode,
    device_id: deviceId,
    end: 'NDEATH published by SparkplugClient.stop() (publishDeath), then DISCONNECT: no Will',
    messages: []
  }
  let born = false

  client.on('error', (error) => {
    console.error(`edge-node: ${error.message}`)
    process.exit(1)
  })
  client.on('birth', () => {
    if (born) return // a reconnect: the tests expect one session
    born = true
    const timestamp = Date.now()
    client.publishNodeBirth({ timestamp, metrics: birthMetrics(NODE_METRICS, 1) })
    report.messages.push({
      message_type: 'NBIRTH',
      device_id: null,
      metrics: reportMetrics(NODE_METRICS, 1, 2)
    })
    client.publishDeviceBirth(deviceId, { timestamp, metrics: birthMetrics(DEVICE_METRICS, 101) })
    report.messages.push({
      message_type: 'DBIRTH',
      device_id: deviceId,
      metrics: reportMetrics(DEVICE_METRICS, 101, 2)
    })
    for (const column of [3, 4]) {
      client.publishNodeData({ timestamp, metrics: dataMetrics(NODE_METRICS, 1, column) })
      report.messages.push({
        message_type: 'NDATA',
        device_id: null,
        metrics: reportMetrics(NODE_METRICS, 1, column)
      })
      client.publishDeviceData(deviceId, {
        timestamp,
        metrics: dataMetrics(DEVICE_METRICS, 101, column)
      })
      report.messages.push({
        message_type: 'DDATA',
        device_id: deviceId,
        metrics: reportMetrics(DEVICE_METRICS, 101, column)
      })
    }
    process.stdout.write(JSON.stringify(report) + '\n')
    client.stop()
  })
  client.on('close', () => {
    process.exitCode = 0
  })
}

main()
