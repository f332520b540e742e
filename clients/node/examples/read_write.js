#!/usr/bin/env node
'use strict';
// Read, filter, stream and write a dataset of a Quiver server from Node.js.
//
//   make serve                                   # a server on ./data with the demo datasets
//   node clients/node/examples/read_write.js [grpc://127.0.0.1:8815]
//
// Options come from the environment: QUIVER_USERNAME / QUIVER_PASSWORD (Basic → Bearer),
// QUIVER_TLS_ROOT_CERTS (a CA file, for grpc+tls://).

const { Client, NotFound, arrow } = require('..');

async function main() {
  const uri = process.argv[2] || 'grpc://127.0.0.1:8815';
  const client = await Client.connect(uri, {
    username: process.env.QUIVER_USERNAME,
    password: process.env.QUIVER_PASSWORD,
    tlsRootCerts: process.env.QUIVER_TLS_ROOT_CERTS,
    timeoutMs: 60_000,
  });
  try {
    console.log('datasets:', (await client.datasets()).join(', '));

    const info = await client.describe('demo');
    console.log(`demo: version ${info.version}, ${info.rows} rows in ${info.fragments} fragments`);

    // One version, a projection and a server-side filter; 64-bit integers come as BigInt.
    const cheap = await client.read('demo', {
      columns: ['id', 'name', 'price'],
      filter: "price < 10 AND category = 'tools'",
      version: info.version,
    });
    console.log(`${cheap.numRows} cheap tools, the first:`, cheap.numRows ? cheap.get(0).toJSON() : null);

    // Batches as they arrive, endpoint after endpoint.
    let rows = 0;
    for await (const batch of client.stream('demo', { columns: ['quantity'] })) rows += batch.numRows;
    console.log(`streamed ${rows} rows`);

    // Write a table (create, then append) and read it back.
    await client.dropDataset('node_example').catch((e) => {
      if (!(e instanceof NotFound)) throw e;
    });
    const table = arrow.tableFromArrays({
      id: BigInt64Array.from([1n, 2n, 9007199254740993n]),
      city: ['Lyon', 'Graz', null],
      score: Float64Array.from([0.5, 1.5, 2.5]),
    });
    console.log('created:', await client.write('node_example', table, { mode: 'create' }));
    console.log('appended:', await client.write('node_example', table));
    await client.createTag('node_example', 'first', 1);
    const back = await client.read('node_example', { tag: 'first' });
    console.log('tag "first":', back.toArray().map((r) => r.toJSON()));
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(`${err.name}${err.code ? ` (${err.code})` : ''}: ${err.message}`);
  process.exit(1);
});
