/* The version of kiln, for --version and the KTX "KTXwriter" key. */
#ifndef KILN_VERSION_H
#define KILN_VERSION_H
#define KILN_VERSION "0.1.0"
#endif
