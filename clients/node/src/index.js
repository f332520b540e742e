'use strict';
// quiver-client: a Node.js client of the Quiver Flight server over plain gRPC.

const arrow = require('apache-arrow');
const errors = require('./errors');
const { Client } = require('./client');
const { readCommand, putCommand, commitBody, updateBody, mergeCommand, backfillCommand } = require('./commands');

module.exports = {
  Client,
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
