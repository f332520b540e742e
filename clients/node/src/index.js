'use strict';
// quiver-client: a Node.js client of the Quiver Flight server over plain gRPC.

const arrow = require('apache-arrow');
const errors = require('./errors');
const { Client } = require('./client');
const { RemoteBlob } = require('./blobs');
const { readCommand, putCommand, commitBody, updateBody, mergeCommand, backfillCommand } = require('./commands');

module.exports = {
  Client,
  RemoteBlob,
  ...errors,
  readCommand,
  putCommand,
  commitBody,
  updateBody,
  mergeCommand,
  backfillCommand,
  /** The apache-arrow module the client decodes into and encodes from. */
  arrow,
};
