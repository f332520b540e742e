'use strict';
// The Flight service client constructor, loaded from Flight.proto with @grpc/proto-loader.

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// A packed copy of the package carries proto/Flight.proto (`npm pack` copies it there);
// in the repository the file is protos/flight/Flight.proto.
const CANDIDATES = [
  path.join(__dirname, '..', 'proto', 'Flight.proto'),
  path.join(__dirname, '..', '..', '..', 'protos', 'flight', 'Flight.proto'),
];

function protoPath() {
  const found = CANDIDATES.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`Flight.proto not found (looked at ${CANDIDATES.join(', ')})`);
  return found;
}

let serviceClient = null;

/** The generated `arrow.flight.protocol.FlightService` client class. */
function flightServiceClient() {
  if (serviceClient === null) {
    const definition = protoLoader.loadSync(protoPath(), {
      keepCase: true,
      longs: String, // int64 fields (total_records) as decimal strings: exact
      enums: String,
      bytes: Buffer,
      defaults: true,
      oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(definition);
    serviceClient = pkg.arrow.flight.protocol.FlightService;
  }
  return serviceClient;
}

module.exports = { flightServiceClient, protoPath };
