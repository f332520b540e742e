// Compiled (never run) by test/types.test.js: the declarations in types/ must describe the API
// as the README and the example use it.
import {
  BackfillResult, Client, CommitConflict, MergeResult, NotFound, QuiverError, arrow, backfillCommand, mergeCommand, readCommand,
} from 'quiver-client';

async function usage(): Promise<void> {
  const client: Client = await Client.connect('grpc://127.0.0.1:8815', {
    username: 'alice',
    password: 'secret',
    tlsRootCerts: '/etc/quiver/ca.pem',
    timeoutMs: 30_000,
  });
  const table: arrow.Table = await client.read('sales', { columns: ['id', 'x'], filter: 'x > 5', version: 3, limit: 10, concurrency: 4 });
  const id: bigint | null = table.getChild('id')?.get(0) ?? null;
  for await (const batch of client.stream('sales', { tag: 'q3', asOf: new Date() })) {
    const rows: number = batch.numRows;
    void rows;
  }
  const info = await client.describe('sales');
  const latest: number = info.latest_version;
  const put: { version: number; rows: number } = await client.write('sales', table, { mode: 'append' });
  const fragments: string[] = await client.stage('sales', table.batches);
  await client.commit('sales', fragments, { readVersion: put.version, idempotencyKey: 'job-1' });
  await client.action('create_tag', { dataset: 'sales', tag: 'q3' });
  const updated: { version: number; updated_rows: number } = await client.update('sales', { x: 'x * 2' }, 'id < 10');
  const merged: MergeResult = await client.merge('sales', table, 'id', { whenNotMatched: null });
  await client.merge('sales', table.batches, ['id'], { whenMatched: 'delete', whenNotMatchedBySource: 'delete', bySourceFilter: 'id < 5' });
  await client.merge('sales', table, null, { matchedCondition: 'source.x > target.x', conflictRetries: 3 });
  console.log(updated.updated_rows, merged.inserted_rows, mergeCommand('sales', 'id'));
  const addresses: arrow.Table = await client.read('sales', { columns: ['_rowaddr', 'x'] });
  const added: BackfillResult = await client.backfill('sales', addresses);
  const corrected: BackfillResult = await client.backfill('sales', addresses.batches, 'update_columns');
  console.log(added.version, corrected.updated_rows ?? 0, backfillCommand('sales', 'update_columns').backfill);
  const names: string[] = await client.datasets();
  const [clip] = await client.takeBlobs('clips', 'video', { indices: [7], version: 2 });
  const head: Buffer | undefined = await clip?.read(0, 188);
  const whole: Array<[number, Buffer | null]> = await client.readBlobs('clips', 'video', { ids: [3] });
  const bytes: arrow.Table = await client.read('clips', { columns: ['video'], blobHandling: 'all_binary' });
  console.log(clip?.size, head?.length, whole.length, bytes.numRows);
  try {
    await client.read('missing');
  } catch (err) {
    if (err instanceof CommitConflict) console.log(err.retryable, err.version);
    if (err instanceof NotFound) console.log(err.code, err.details);
    if (err instanceof QuiverError) console.log(err.message, err.grpcCode);
  }
  console.log(id, latest, names, readCommand('sales', { version: 1 }));
  client.close();
}
void usage;
