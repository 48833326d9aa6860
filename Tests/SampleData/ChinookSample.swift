/// A database shaped like the Chinook sample (its schema, integer keys, a composite key,
/// foreign keys everywhere, a self-reference), with rows generated in SQL, so that the tests
/// and the bench need nothing outside the repository. About 12,000 rows: 275 artists, 347
/// albums, 3,503 tracks, 18 playlists (the first holds every track), 8 employees, 59
/// customers, 412 invoices and 2,240 invoice lines.
public enum ChinookSample {
    /// The tables, parents before children.
    public static let tables = [
        "Album", "Artist", "Customer", "Employee", "Genre", "Invoice", "InvoiceLine", "MediaType", "Playlist", "PlaylistTrack",
        "Track",
    ]

    /// SQL that creates the tables and fills them, for `sqlite3` or `Database.execute`.
    public static let sql = schema + rows

    static let schema = """
        CREATE TABLE [Artist] ([ArtistId] INTEGER NOT NULL, [Name] NVARCHAR(120), CONSTRAINT [PK_Artist] PRIMARY KEY ([ArtistId]));
        CREATE TABLE [Album] ([AlbumId] INTEGER NOT NULL, [Title] NVARCHAR(160) NOT NULL, [ArtistId] INTEGER NOT NULL,
          CONSTRAINT [PK_Album] PRIMARY KEY ([AlbumId]),
          FOREIGN KEY ([ArtistId]) REFERENCES [Artist] ([ArtistId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [Employee] ([EmployeeId] INTEGER NOT NULL, [LastName] NVARCHAR(20) NOT NULL, [FirstName] NVARCHAR(20) NOT NULL,
          [Title] NVARCHAR(30), [ReportsTo] INTEGER, [BirthDate] DATETIME, [HireDate] DATETIME, [Address] NVARCHAR(70),
          [City] NVARCHAR(40), [State] NVARCHAR(40), [Country] NVARCHAR(40), [PostalCode] NVARCHAR(10), [Phone] NVARCHAR(24),
          [Fax] NVARCHAR(24), [Email] NVARCHAR(60), CONSTRAINT [PK_Employee] PRIMARY KEY ([EmployeeId]),
          FOREIGN KEY ([ReportsTo]) REFERENCES [Employee] ([EmployeeId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [Customer] ([CustomerId] INTEGER NOT NULL, [FirstName] NVARCHAR(40) NOT NULL, [LastName] NVARCHAR(20) NOT NULL,
          [Company] NVARCHAR(80), [Address] NVARCHAR(70), [City] NVARCHAR(40), [State] NVARCHAR(40), [Country] NVARCHAR(40),
          [PostalCode] NVARCHAR(10), [Phone] NVARCHAR(24), [Fax] NVARCHAR(24), [Email] NVARCHAR(60) NOT NULL, [SupportRepId] INTEGER,
          CONSTRAINT [PK_Customer] PRIMARY KEY ([CustomerId]),
          FOREIGN KEY ([SupportRepId]) REFERENCES [Employee] ([EmployeeId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [Genre] ([GenreId] INTEGER NOT NULL, [Name] NVARCHAR(120), CONSTRAINT [PK_Genre] PRIMARY KEY ([GenreId]));
        CREATE TABLE [MediaType] ([MediaTypeId] INTEGER NOT NULL, [Name] NVARCHAR(120), CONSTRAINT [PK_MediaType] PRIMARY KEY ([MediaTypeId]));
        CREATE TABLE [Invoice] ([InvoiceId] INTEGER NOT NULL, [CustomerId] INTEGER NOT NULL, [InvoiceDate] DATETIME NOT NULL,
          [BillingAddress] NVARCHAR(70), [BillingCity] NVARCHAR(40), [BillingState] NVARCHAR(40), [BillingCountry] NVARCHAR(40),
          [BillingPostalCode] NVARCHAR(10), [Total] NUMERIC(10,2) NOT NULL, CONSTRAINT [PK_Invoice] PRIMARY KEY ([InvoiceId]),
          FOREIGN KEY ([CustomerId]) REFERENCES [Customer] ([CustomerId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [Track] ([TrackId] INTEGER NOT NULL, [Name] NVARCHAR(200) NOT NULL, [AlbumId] INTEGER, [MediaTypeId] INTEGER NOT NULL,
          [GenreId] INTEGER, [Composer] NVARCHAR(220), [Milliseconds] INTEGER NOT NULL, [Bytes] INTEGER, [UnitPrice] NUMERIC(10,2) NOT NULL,
          CONSTRAINT [PK_Track] PRIMARY KEY ([TrackId]),
          FOREIGN KEY ([AlbumId]) REFERENCES [Album] ([AlbumId]) ON DELETE NO ACTION ON UPDATE NO ACTION,
          FOREIGN KEY ([GenreId]) REFERENCES [Genre] ([GenreId]) ON DELETE NO ACTION ON UPDATE NO ACTION,
          FOREIGN KEY ([MediaTypeId]) REFERENCES [MediaType] ([MediaTypeId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [InvoiceLine] ([InvoiceLineId] INTEGER NOT NULL, [InvoiceId] INTEGER NOT NULL, [TrackId] INTEGER NOT NULL,
          [UnitPrice] NUMERIC(10,2) NOT NULL, [Quantity] INTEGER NOT NULL, CONSTRAINT [PK_InvoiceLine] PRIMARY KEY ([InvoiceLineId]),
          FOREIGN KEY ([InvoiceId]) REFERENCES [Invoice] ([InvoiceId]) ON DELETE NO ACTION ON UPDATE NO ACTION,
          FOREIGN KEY ([TrackId]) REFERENCES [Track] ([TrackId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE TABLE [Playlist] ([PlaylistId] INTEGER NOT NULL, [Name] NVARCHAR(120), CONSTRAINT [PK_Playlist] PRIMARY KEY ([PlaylistId]));
        CREATE TABLE [PlaylistTrack] ([PlaylistId] INTEGER NOT NULL, [TrackId] INTEGER NOT NULL,
          CONSTRAINT [PK_PlaylistTrack] PRIMARY KEY ([PlaylistId], [TrackId]),
          FOREIGN KEY ([PlaylistId]) REFERENCES [Playlist] ([PlaylistId]) ON DELETE NO ACTION ON UPDATE NO ACTION,
          FOREIGN KEY ([TrackId]) REFERENCES [Track] ([TrackId]) ON DELETE NO ACTION ON UPDATE NO ACTION);
        CREATE INDEX [IFK_AlbumArtistId] ON [Album] ([ArtistId]);
        CREATE INDEX [IFK_CustomerSupportRepId] ON [Customer] ([SupportRepId]);
        CREATE INDEX [IFK_EmployeeReportsTo] ON [Employee] ([ReportsTo]);
        CREATE INDEX [IFK_InvoiceCustomerId] ON [Invoice] ([CustomerId]);
        CREATE INDEX [IFK_InvoiceLineInvoiceId] ON [InvoiceLine] ([InvoiceId]);
        CREATE INDEX [IFK_InvoiceLineTrackId] ON [InvoiceLine] ([TrackId]);
        CREATE INDEX [IFK_PlaylistTrackTrackId] ON [PlaylistTrack] ([TrackId]);
        CREATE INDEX [IFK_TrackAlbumId] ON [Track] ([AlbumId]);
        CREATE INDEX [IFK_TrackGenreId] ON [Track] ([GenreId]);
        CREATE INDEX [IFK_TrackMediaTypeId] ON [Track] ([MediaTypeId]);

        """

    /// Every value comes from the row's number, so every run makes the same file.
    static let rows = """
        BEGIN;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 275)
          INSERT INTO Artist SELECT i, 'Artist ' || i || CASE WHEN i % 7 = 0 THEN ' & Friends' ELSE '' END FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 347)
          INSERT INTO Album SELECT i, 'Album ' || i, 1 + (i * 37) % 275 FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25)
          INSERT INTO Genre SELECT i, 'Genre ' || i FROM n;
        INSERT INTO MediaType VALUES (1, 'MPEG audio file'), (2, 'Protected AAC audio file'), (3, 'Protected MPEG-4 video file'),
          (4, 'Purchased AAC audio file'), (5, 'AAC audio file');
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3503)
          INSERT INTO Track SELECT i, 'Track ' || i, 1 + (i - 1) % 347, 1 + i % 5, 1 + i % 25,
            CASE WHEN i % 3 = 0 THEN NULL ELSE 'Composer ' || (i % 97) END, 180000 + (i * 7919) % 200000,
            5000000 + (i * 104729) % 5000000, CASE WHEN i % 10 = 0 THEN 1.99 ELSE 0.99 END FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 18)
          INSERT INTO Playlist SELECT i, 'Playlist ' || i FROM n;
        INSERT INTO PlaylistTrack SELECT 1, TrackId FROM Track;
        INSERT INTO PlaylistTrack SELECT 2 + TrackId % 17, TrackId FROM Track WHERE TrackId % 2 = 0;
        INSERT INTO Employee VALUES (1, 'Adams', 'Andrew', 'General Manager', NULL, '1962-02-18 00:00:00', '2002-08-14 00:00:00',
          '11120 Jasper Ave NW', 'Edmonton', 'AB', 'Canada', 'T5K 2N1', '+1 (780) 428-9482', '+1 (780) 428-3457', 'andrew@example.com');
        WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
          INSERT INTO Employee SELECT i, 'Last' || i, 'First' || i, 'Sales Support Agent', CASE WHEN i < 4 THEN 1 ELSE 2 END,
            '1970-01-0' || i || ' 00:00:00', '2003-05-0' || i || ' 00:00:00', i || ' Main St', 'Calgary', 'AB', 'Canada',
            'T2P 2T3', '+1 (403) 262-34' || i || '3', NULL, 'employee' || i || '@example.com' FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 59)
          INSERT INTO Customer SELECT i, 'First' || i, 'Last' || i, CASE WHEN i % 4 = 0 THEN 'Company ' || i END,
            i || ' Street', 'City ' || (i % 24), NULL, 'Country ' || (i % 24), printf('%05d', i * 131), '+1 555 ' || printf('%04d', i),
            NULL, 'customer' || i || '@example.com', 3 + i % 3 FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 412)
          INSERT INTO Invoice SELECT i, 1 + (i * 7) % 59, date('2021-01-01', '+' || (i * 3) || ' days') || ' 00:00:00',
            i || ' Street', 'City ' || (i % 24), NULL, 'Country ' || (i % 24), printf('%05d', i), 0 FROM n;
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2240)
          INSERT INTO InvoiceLine SELECT i, 1 + (i - 1) * 412 / 2240, 1 + (i * 211) % 3503, CASE WHEN i % 10 = 0 THEN 1.99 ELSE 0.99 END, 1 FROM n;
        UPDATE Invoice SET Total = (SELECT round(sum(UnitPrice * Quantity), 2) FROM InvoiceLine l WHERE l.InvoiceId = Invoice.InvoiceId);
        COMMIT;

        """
}
